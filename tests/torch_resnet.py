#!/usr/bin/python3
"""torch_resnet.py DIR — the PyTorch side of tests/test_resnet_reference.c.

Reads DIR/config.json (kind resnet20|resnet18|resnet50, in-channels, classes,
batch, steps, lr, momentum, and every tessel parameter in order with name,
element count and whether it is trainable), DIR/params.bin (their initial values,
f32, concatenated in that order), DIR/x.bin (steps, B, C, H, W) f32 and
DIR/y.bin (steps, B) i32 — params and x as f64, computed in the config's
dtype (f32 or f64). Builds the same ResNet with torchvision's module
names (written here: Debian's torch has no torchvision), loads the values by
name, replays the steps with SGD + momentum in train mode and writes
DIR/losses.bin (steps), DIR/grads.bin (first-step gradients of the trainable
parameters, tessel's order) and DIR/state.bin (every batch-norm running
statistic after the last step, tessel's order), all f64 little-endian.
With "amp": "bf16" the steps run under torch.autocast('cpu', bfloat16) (the
loss in f32), after an f32 run from the same values whose outputs get the
suffix _f32 (losses_f32.bin, ...): how far bf16 itself moves PyTorch.
"""
import json
import os
import sys

import numpy as np
import torch
from torch import nn


class Basic(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # v1.5: stride on the 3x3
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = torch.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return torch.relu(h + (self.downsample(x) if self.downsample is not None else x))


ARCHS = {  # stem, stem channels, blocks per stage, planes per stage, bottleneck
    "resnet20": (3, 16, [3, 3, 3], [16, 32, 64], False),
    "resnet18": (3, 64, [2, 2, 2, 2], [64, 128, 256, 512], False),
    "resnet50": (7, 64, [3, 4, 6, 3], [64, 128, 256, 512], True),
}


class ResNet(nn.Module):
    def __init__(self, kind, cin, classes):
        super().__init__()
        stem, c, blocks, planes, bottleneck = ARCHS[kind]
        self.stem = stem
        self.conv1 = nn.Conv2d(cin, c, 7 if stem == 7 else 3, 2 if stem == 7 else 1, 3 if stem == 7 else 1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        block = Bottleneck if bottleneck else Basic
        for s, (n, p) in enumerate(zip(blocks, planes)):
            layers = []
            for b in range(n):
                layers.append(block(c, p, 2 if b == 0 and s > 0 else 1))
                c = p * 4 if bottleneck else p
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))
        self.nstages = len(blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        if self.stem == 7:
            h = nn.functional.max_pool2d(h, 3, 2, 1)
        for s in range(self.nstages):
            h = getattr(self, f"layer{s + 1}")(h)
        return self.fc(h.mean(dim=(2, 3)))


def main():
    d = sys.argv[1]
    torch.set_num_threads(2)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    b, steps, c, h, w = cfg["batch"], cfg["steps"], cfg["channels"], cfg["size"], cfg["size"]
    dt = {"f32": torch.float32, "f64": torch.float64}[cfg["dtype"]]
    net = ResNet(cfg["kind"], c, cfg["classes"]).to(dt)
    sd = net.state_dict()
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype="<f8")
    off, new = 0, {}
    for p in cfg["params"]:
        n = p["numel"]
        if p["name"] not in sd:
            sys.exit(f"torch_resnet.py: tessel parameter {p['name']!r} has no torch counterpart")
        if sd[p["name"]].numel() != n:
            sys.exit(f"torch_resnet.py: {p['name']} has {n} values in tessel, {sd[p['name']].numel()} in torch")
        new[p["name"]] = torch.from_numpy(flat[off:off + n].copy()).to(dt).view(sd[p["name"]].shape)
        off += n
    assert off == flat.size, f"params.bin has {flat.size} floats, the config {off}"
    missing = [k for k in sd if k not in new and not k.endswith("num_batches_tracked")]
    if missing:
        sys.exit(f"torch_resnet.py: torch has parameters tessel lacks: {missing[:5]}")
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.bin"), dtype="<f8").reshape(steps, b, c, h, w)).to(dt)
    y = torch.from_numpy(np.fromfile(os.path.join(d, "y.bin"), dtype="<i4").reshape(steps, b)).long()
    amp = cfg.get("amp") == "bf16"
    # bf16: the f32 run too (suffix _f32), the scale of bf16's own noise
    for suffix, autocast in ([("_f32", False)] if amp else []) + [("", amp)]:
        losses, grads, state = replay(net, new, cfg, x, y, steps, autocast)
        np.asarray(losses, dtype="<f8").tofile(os.path.join(d, f"losses{suffix}.bin"))
        grads.astype("<f8").tofile(os.path.join(d, f"grads{suffix}.bin"))
        state.astype("<f8").tofile(os.path.join(d, f"state{suffix}.bin"))


def replay(net, init, cfg, x, y, steps, autocast):
    """SGD-momentum steps from the initial values `init`; autocast: CPU bf16
    autocast for the network, the loss in f32 (tessel's policy)."""
    net.load_state_dict(init, strict=False)
    net.train()
    named = dict(net.named_parameters())
    trainable = [named[p["name"]] for p in cfg["params"] if p["trainable"]]
    opt = torch.optim.SGD(trainable, lr=cfg["lr"], momentum=cfg["momentum"])
    losses, grads = [], None
    for s in range(steps):
        opt.zero_grad()
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = net(x[s])
            loss = nn.functional.cross_entropy(logits.float(), y[s])
        else:
            loss = nn.functional.cross_entropy(net(x[s]), y[s])
        loss.backward()
        if s == 0:
            grads = np.concatenate([t.grad.detach().numpy().ravel() for t in trainable])
        opt.step()
        losses.append(loss.item())
    sd = net.state_dict()
    state = np.concatenate([sd[p["name"]].numpy().ravel() for p in cfg["params"] if not p["trainable"]])
    return losses, grads, state


if __name__ == "__main__":
    main()
