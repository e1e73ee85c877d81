#!/usr/bin/python3
"""torch_gpt_kjv.py — PyTorch's run of `tessel train --model gpt` (the
defaults) on the King James Bible, for the quality comparison in the README.

Same model (tests/torch_gpt.py: nanoGPT, 6 layers, d_model 256, 4 heads,
seq 128, byte vocabulary 256, tied head, dropout 0), initialization
(N(0, 0.02), c_proj N(0, 0.02/sqrt(2*layers)), biases 0), optimizer (AdamW
lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on matrices and embeddings),
schedule (tessel's ts_lr_at: linear warm-up from 0 over 100 steps, cosine to
0.1x at the last step), gradient clipping (global norm 1.0), batch 16,
split (train = the first n*9//10 bytes, validation = the rest) and
evaluation (mean cross-entropy in nats per byte over 20 batches of 16 windows
at tessel's fixed positions, ts_text_valid_start with seed 0, every 100 steps
and at the end). Training windows: uniform random starts in the training
split (nanoGPT's get_batch), seeded; tessel's loader walks the same split in
another order, so the curves agree in distribution, not step for step.

  usage: torch_gpt_kjv.py [--data-file F (/usr/local/share/tessel/kjv.txt)]
                          [--steps 600] [--threads 2] [--seed 0] [--sample N]
                          [--layers 6 --d-model 256 --heads 4 --seq 128 --batch 16]
                          (the model flags only for smoke tests)

Prints `step N | val loss X` lines and {"step":N,"val_loss":X} JSON lines, and
the training tokens/s. Run with
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp (../shared/peer-baselines.md).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_gpt import GPT, lr_at, make_adamw  # noqa: E402

M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def valid_start(seed, i, L, seq):
    """tessel's ts_text_valid_start."""
    return splitmix64(seed ^ ((i * 0xD1B54A32D192ED03) & M64)) % (L - seq)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-file", default="/usr/local/share/tessel/kjv.txt")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--sample", type=int, default=0)
    for k, v in (("layers", 6), ("d-model", 256), ("heads", 4), ("seq", 128), ("batch", 16)):  # smoke tests
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data = np.fromfile(a.data_file, dtype=np.uint8)
    ntrain = len(data) * 9 // 10
    train, valid = torch.from_numpy(data[:ntrain].astype(np.int64)), torch.from_numpy(data[ntrain:].astype(np.int64))
    B, T, V = a.batch, a.seq, 256
    model = GPT(a.layers, a.d_model, a.heads, T, V)
    opt = make_adamw(model, 1e-3, (0.9, 0.95), 0.1)
    warmup = 100 if a.steps >= 200 else a.steps // 10
    starts = [valid_start(0, i, len(valid), T) for i in range(20 * B)]
    vx = torch.stack([valid[s:s + T] for s in starts]).view(20, B, T)
    vy = torch.stack([valid[s + 1:s + T + 1] for s in starts]).view(20, B, T)

    def evaluate(step):
        model.eval()
        with torch.no_grad():
            v = float(np.mean([model.loss(vx[k], vy[k]).item() for k in range(20)]))
        model.train()
        print(f"step {step} | val loss {v:.4f}")
        print(json.dumps({"step": step, "val_loss": v}), flush=True)

    g = torch.Generator().manual_seed(a.seed)
    t_train = 0.0
    for step in range(a.steps):
        t0 = time.perf_counter()
        ix = torch.randint(len(train) - T - 1, (B,), generator=g)
        x = torch.stack([train[i:i + T] for i in ix])
        y = torch.stack([train[i + 1:i + T + 1] for i in ix])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, 1e-3, warmup, a.steps, 1e-4)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        t_train += time.perf_counter() - t0
        print(json.dumps({"step": step + 1, "loss": lv}), flush=True)
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            evaluate(step + 1)
    print(f"done: {a.steps} steps, {a.steps * B * T / t_train:.0f} tokens/s training")
    if a.sample > 0:
        model.eval()
        ctx = list(b"\n")
        with torch.no_grad():
            for _ in range(a.sample):
                logits = model(torch.tensor([ctx[-T:]]))[0, -1] / 0.8
                v, _ = torch.topk(logits, min(200, V))
                logits[logits < v[-1]] = -float("inf")
                ctx.append(int(torch.multinomial(torch.softmax(logits, -1), 1)))
        print(bytes(ctx).decode("utf-8", "replace"))


if __name__ == "__main__":
    main()
