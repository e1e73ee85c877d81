#!/usr/bin/env python3
"""ckpt_torch.py — PyTorch interop of `tessel ckpt export` (run by
tests/test_ckpt_torch.c): reads the exported safetensors file with a small
numpy reader (no safetensors package), loads it into a torch 1.13 MLP with
PyTorch's own names and layouts via load_state_dict(strict=True), and checks
that its logits on tessel's batch equal tessel's logits within 1e-5.

usage: ckpt_torch.py MODEL.safetensors X.bin LOGITS.bin BATCH
Exit 0 on a match; prints the worst difference either way."""
import json
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64,
          "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors_header(path):
    """The JSON header of a safetensors file (its length checked)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        (n,) = struct.unpack("<Q", raw)
        header = f.read(n)
    assert len(header) == n, f"{path}: header length {n} runs past the end"
    return json.loads(header)


def read_safetensors(path):
    """{name: np.ndarray} of a safetensors file, every offset checked."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw), f"{path}: header length {n} runs past the end"
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        count = int(np.prod(e["shape"])) if e["shape"] else 1
        assert 0 <= b <= end <= len(data) and end - b == count * dt.itemsize, f"{name}: bad data_offsets"
        out[name] = np.frombuffer(data, dtype=dt, count=count, offset=b).reshape(e["shape"]).copy()
    return out


class MLP(torch.nn.Module):
    """tessel's ts_model_mlp: 784-512-512-10 with ReLU, PyTorch names."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 512)
        self.fc2 = torch.nn.Linear(512, 512)
        self.fc3 = torch.nn.Linear(512, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x.reshape(x.shape[0], -1)))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


def main():
    model_path, x_path, logits_path, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tensors = read_safetensors(model_path)
    model = MLP()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    x = torch.from_numpy(np.fromfile(x_path, dtype="<f4").reshape(batch, 784))
    want = np.fromfile(logits_path, dtype="<f4").reshape(batch, 10)
    with torch.no_grad():
        got = model(x).numpy()
    diff = float(np.max(np.abs(got - want)))
    print(f"ckpt_torch: {len(tensors)} tensors loaded strictly; max |torch - tessel| logits = {diff:.3g}")
    sys.exit(0 if diff <= 1e-5 else 1)


if __name__ == "__main__":
    main()
