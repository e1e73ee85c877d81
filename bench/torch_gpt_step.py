#!/usr/bin/python3
"""torch_gpt_step.py — PyTorch's side of bench/run_gpt_step.sh: the time of
one GPT training step (zero_grad, forward, cross-entropy, backward,
clip_grad_norm_(1.0), AdamW (0.9, 0.95), weight decay 0.1 on matrices,
loss.item()), fp32, with the model of tests/torch_gpt.py (nanoGPT: pre-LN,
tied head, explicit causal attention, bias=True).

  usage: torch_gpt_step.py [--init DIR] [--layers 6] [--d-model 256] [--heads 4]
                           [--seq 128] [--vocab 8192] [--batch 8] [--steps 20]
                           [--warmup 3] [--threads 2] [--amp none|bf16]

--amp bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16)
(backward, clipping and AdamW outside it, as the autocast recipe says).

--init DIR: the model config, initial weights and the 4 batches that
bench_gpt_step --dump DIR wrote (then the first loss equals tessel's);
without it, its own initialization and random tokens. Prints
  RESULT torch gpt amp=none|bf16 batch=B seq=T steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=..
         tokens_per_s=.. first_loss=L
Run it with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp (as
run_gpt_step.sh does; ../shared/peer-baselines.md: the default pthread
OpenBLAS oversubscribes the cores and halves the GPT's speed).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_gpt import GPT, make_adamw  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init")
    for k, v in (("layers", 6), ("d-model", 256), ("heads", 4), ("seq", 128), ("vocab", 8192), ("batch", 8),
                 ("steps", 20), ("warmup", 3), ("threads", 2)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--amp", choices=("none", "bf16"), default="none")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = {"layers": a.layers, "d_model": a.d_model, "heads": a.heads, "seq": a.seq, "vocab": a.vocab,
           "batch": a.batch, "batches": 4}
    if a.init:
        with open(os.path.join(a.init, "config.json")) as f:
            cfg = json.load(f)
    B, T, nb = cfg["batch"], cfg["seq"], cfg["batches"]
    model = GPT(cfg["layers"], cfg["d_model"], cfg["heads"], cfg["seq"], cfg["vocab"])
    if a.init:
        flat = np.fromfile(os.path.join(a.init, "params.bin"), dtype="<f4")
        sd, off, new = model.state_dict(), 0, {}
        for p in cfg["params"]:
            n = p["numel"]
            new[p["name"]] = torch.from_numpy(flat[off:off + n].copy()).view(sd[p["name"]].shape)
            off += n
        model.load_state_dict(new)
        x = torch.from_numpy(np.fromfile(os.path.join(a.init, "x.bin"), dtype="<i4").reshape(nb, B, T)).long()
        y = torch.from_numpy(np.fromfile(os.path.join(a.init, "y.bin"), dtype="<i4").reshape(nb, B, T)).long()
    else:
        g = torch.Generator().manual_seed(0)
        w = torch.randint(0, cfg["vocab"], (nb, B, T + 1), generator=g)
        x, y = w[:, :, :-1].contiguous(), w[:, :, 1:].contiguous()
    opt = make_adamw(model, 1e-3, (0.9, 0.95), 0.1, fused=None)
    ms, first = [], None
    for t in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        k = t % nb
        opt.zero_grad(set_to_none=True)
        if a.amp == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model.loss(x[k], y[k])
        else:
            loss = model.loss(x[k], y[k])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        v = loss.item()
        if t == 0:
            first = v
        if t >= a.warmup:
            ms.append(1e3 * (time.perf_counter() - t0))
    ms = np.array(ms)
    med = float(np.median(ms))
    print(f"RESULT torch gpt amp={a.amp} batch={B} seq={T} steps={a.steps} warmup={a.warmup} median_ms={med:.2f} "
          f"p25_ms={np.percentile(ms, 25):.2f} p75_ms={np.percentile(ms, 75):.2f} "
          f"tokens_per_s={B * T / (med / 1e3):.0f} first_loss={first:.9g}")


if __name__ == "__main__":
    main()
