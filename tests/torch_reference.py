#!/usr/bin/python3
"""torch_reference.py DIR — the PyTorch side of tests/test_torch_reference.c.

Reads DIR/config.json (model, optimizer, batch, steps, tessel's trainable
parameters in order with names and shapes), DIR/params.bin (initial weights,
f32, concatenated in that order), DIR/x.bin (steps, B, 1, 28, 28) f32 and
DIR/y.bin (steps, B) i32; replays the training steps on the same model in
PyTorch (f32, 2 threads, dropout omitted as in tessel's test) and writes
DIR/losses.bin (steps) f32 and DIR/grads.bin (first-step gradients, in
tessel's parameter order) f32. Raw files are little-endian.
"""
import json
import os
import sys

import numpy as np
import torch
from torch import nn


def build(model):
    if model == "mlp":  # 784-512-512-10, ReLU
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                             nn.ReLU(), nn.Linear(512, 10))
    if model == "cnn":  # the PyTorch MNIST example without its two dropout layers
        return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    sys.exit(f"torch_reference.py: unknown model {model!r}")


def match_params(net, specs):
    """Maps tessel's parameters to the torch ones: layers in order of first
    appearance of the name prefix ("fc1" of "fc1.weight"), then weight/bias
    by suffix. Returns a list of torch tensors in tessel's order."""
    layers = [m for m in net if isinstance(m, (nn.Linear, nn.Conv2d))]
    prefixes = []
    for s in specs:
        prefix = s["name"].rsplit(".", 1)[0]
        if prefix not in prefixes:
            prefixes.append(prefix)
    if len(prefixes) != len(layers):
        sys.exit(f"torch_reference.py: tessel has layers {prefixes}, torch has {len(layers)} layers")
    out = []
    for s in specs:
        prefix, suffix = s["name"].rsplit(".", 1)
        layer = layers[prefixes.index(prefix)]
        if suffix not in ("weight", "bias"):
            sys.exit(f"torch_reference.py: parameter {s['name']!r} is neither a weight nor a bias")
        t = getattr(layer, suffix)
        if list(t.shape) != s["shape"]:
            sys.exit(f"torch_reference.py: {s['name']} has shape {s['shape']} in tessel "
                     f"but {list(t.shape)} in torch")
        out.append(t)
    return out


def main():
    d = sys.argv[1]
    torch.set_num_threads(2)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    b, steps = cfg["batch"], cfg["steps"]
    net = build(cfg["model"])
    params = match_params(net, cfg["params"])
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype="<f4")
    off = 0
    with torch.no_grad():
        for t in params:
            n = t.numel()
            t.copy_(torch.from_numpy(flat[off:off + n].copy()).view(t.shape))
            off += n
    assert off == flat.size, f"params.bin has {flat.size} floats, the model {off}"
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.bin"), dtype="<f4").reshape(steps, b, 1, 28, 28))
    y = torch.from_numpy(np.fromfile(os.path.join(d, "y.bin"), dtype="<i4").reshape(steps, b)).long()

    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                              weight_decay=cfg["weight_decay"])
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    losses, grads = [], None
    for s in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x[s]), y[s])
        loss.backward()
        if s == 0:
            grads = np.concatenate([t.grad.detach().numpy().ravel() for t in params])
        opt.step()
        losses.append(loss.item())
    np.asarray(losses, dtype="<f4").tofile(os.path.join(d, "losses.bin"))
    grads.astype("<f4").tofile(os.path.join(d, "grads.bin"))


if __name__ == "__main__":
    main()
