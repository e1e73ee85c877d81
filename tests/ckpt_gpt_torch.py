#!/usr/bin/python3
"""ckpt_gpt_torch.py — the GPT export in PyTorch (run by tests/test_ckpt_gpt.c):
reads the safetensors file `tessel ckpt export` wrote with the numpy reader
of ckpt_torch.py, loads it into nanoGPT's model (tests/torch_gpt.py's GPT:
model.py's modules and names, LM head tied to transformer.wte.weight) with
load_state_dict(strict=True), and checks its logits on tessel's tokens
against tessel's logits within 1e-4 relative (max(1, |x|)).

usage: ckpt_gpt_torch.py MODEL.safetensors X.bin LOGITS.bin B T LAYERS D_MODEL HEADS SEQ VOCAB"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_torch import read_safetensors  # noqa: E402
from torch_gpt import GPT  # noqa: E402


def main():
    path, xp, lp = sys.argv[1:4]
    b, t, layers, d, heads, seq, vocab = map(int, sys.argv[4:11])
    torch.set_num_threads(2)
    model = GPT(layers, d, heads, seq, vocab)
    tensors = read_safetensors(path)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    x = torch.from_numpy(np.fromfile(xp, dtype="<i4").reshape(b, t)).long()
    want = np.fromfile(lp, dtype="<f4").reshape(b, t, vocab)
    with torch.no_grad():
        got = model(x).numpy()
    worst = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
    print(f"ckpt_gpt_torch: {len(tensors)} tensors loaded strictly; worst relative logits difference {worst:.3g}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
