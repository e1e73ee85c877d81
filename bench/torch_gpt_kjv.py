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
and at the end). The batches are tessel's own, bit for bit (bench/text_data.py:
the loader's shuffled training windows for --seed, the fixed validation
windows), so the two runs differ only in arithmetic.

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
from text_data import TextData  # noqa: E402  (bench/, next to this file)


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
    B, T, V = a.batch, a.seq, 256
    data = TextData(a.data_file, seq=T, batch=B, seed=a.seed, eval_batches=20)
    model = GPT(a.layers, a.d_model, a.heads, T, V)
    opt = make_adamw(model, 1e-3, (0.9, 0.95), 0.1)
    warmup = 100 if a.steps >= 200 else a.steps // 10
    valid = [tuple(torch.from_numpy(np.asarray(v, dtype=np.int64)) for v in data.valid_batch(k)) for k in range(20)]

    def evaluate(step):
        model.eval()
        with torch.no_grad():
            v = float(np.mean([model.loss(vx, vy).item() for vx, vy in valid]))
        model.train()
        print(f"step {step} | val loss {v:.4f}")
        print(json.dumps({"step": step, "val_loss": v}), flush=True)

    t_train = 0.0
    for step in range(a.steps):
        x, y = (torch.from_numpy(np.asarray(v, dtype=np.int64)) for v in data.train_batch(step))
        t0 = time.perf_counter()
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
