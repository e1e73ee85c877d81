#!/usr/bin/python3
"""torch_gpt.py — nanoGPT-style GPT in PyTorch, shared by tests and benches.

As a module: GPT(layers, d_model, heads, seq, vocab), a nanoGPT model.py
equivalent (bias=True, dropout 0, LM head tied to transformer.wte.weight)
with tessel's parameter names and initialization (tessel/nn.h
ts_model_gpt), and make_adamw / clip for the optimizer setup tessel uses:
AdamW with weight decay on parameters of rank >= 2 only, clip_grad_norm_.

As a script, `torch_gpt.py DIR`: the PyTorch side of
tests/test_gpt_reference.c. Reads DIR/config.json (the model config, batch,
T, steps, lr, betas, weight decay, clip norm, and every tessel parameter in
order with name and element count), DIR/params.bin (their initial values,
f64), DIR/x.bin and DIR/y.bin ((steps, B, T) i32); replays the steps in f32
and writes DIR/losses.bin (steps) and DIR/grads.bin (the first step's
gradients before clipping, tessel's order), f64 little-endian.
"""
import json
import math
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(d, 3 * d)
        self.attn.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(d, 4 * d)
        self.mlp.c_proj = nn.Linear(4 * d, d)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))  # nanoGPT's explicit path
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = att @ v
        return self.attn.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, layers, d_model, heads, seq, vocab):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, d_model)
        self.transformer.wpe = nn.Embedding(seq, d_model)
        self.transformer.h = nn.ModuleList([Block(d_model, heads) for _ in range(layers)])
        self.transformer.ln_f = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():  # nanoGPT's _init_weights
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx):
        T = idx.shape[1]
        h = self.transformer.wte(idx) + self.transformer.wpe.weight[:T]
        for blk in self.transformer.h:
            h = blk(h)
        h = self.transformer.ln_f(h)
        return h @ self.transformer.wte.weight.t()  # the tied LM head

    def loss(self, idx, y):
        logits = self(idx)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))


def make_adamw(model, lr, betas=(0.9, 0.95), weight_decay=0.1, fused=None):
    """AdamW with weight decay on rank >= 2 parameters only (nanoGPT's rule)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]
    kw = {} if fused is None else {"fused": fused}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **kw)


def lr_at(step, base, warmup, total, min_lr):
    """tessel's ts_lr_at (cosine): linear warm-up from 0, cosine to min_lr at total."""
    if warmup > 0 and step < warmup:
        return base * step / warmup
    span = total - warmup
    if span <= 0:
        return min_lr
    prog = min(1.0, (step - warmup) / span)
    return min_lr + 0.5 * (base - min_lr) * (1 + math.cos(math.pi * prog))


def main():
    d = sys.argv[1]
    torch.set_num_threads(2)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    B, T, steps = cfg["batch"], cfg["T"], cfg["steps"]
    model = GPT(cfg["layers"], cfg["d_model"], cfg["heads"], cfg["seq"], cfg["vocab"])
    sd = model.state_dict()
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype="<f8")
    off, new = 0, {}
    for p in cfg["params"]:
        n = p["numel"]
        if p["name"] not in sd:
            sys.exit(f"torch_gpt.py: tessel parameter {p['name']!r} has no torch counterpart")
        if sd[p["name"]].numel() != n:
            sys.exit(f"torch_gpt.py: {p['name']} has {n} values in tessel, {sd[p['name']].numel()} in torch")
        new[p["name"]] = torch.from_numpy(flat[off:off + n].copy()).float().view(sd[p["name"]].shape)
        off += n
    assert off == flat.size, f"params.bin has {flat.size} values, the config {off}"
    missing = [k for k in sd if k not in new]
    if missing:
        sys.exit(f"torch_gpt.py: torch has parameters tessel lacks: {missing[:5]}")
    model.load_state_dict(new)
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.bin"), dtype="<i4").reshape(steps, B, T)).long()
    y = torch.from_numpy(np.fromfile(os.path.join(d, "y.bin"), dtype="<i4").reshape(steps, B, T)).long()
    named = dict(model.named_parameters())
    order = [named[p["name"]] for p in cfg["params"]]
    opt = make_adamw(model, cfg["lr"], (cfg["beta1"], cfg["beta2"]), cfg["weight_decay"])
    losses, grads = [], None
    for s in range(steps):
        opt.zero_grad()
        loss = model.loss(x[s], y[s])
        loss.backward()
        if s == 0:
            grads = np.concatenate([p.grad.detach().double().numpy().ravel() for p in order])
        if cfg["clip"] > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
        opt.step()
        losses.append(loss.item())
    np.asarray(losses, dtype="<f8").tofile(os.path.join(d, "losses.bin"))
    grads.astype("<f8").tofile(os.path.join(d, "grads.bin"))


if __name__ == "__main__":
    main()
