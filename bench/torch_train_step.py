#!/usr/bin/python3
"""torch_train_step.py — the PyTorch reference for bench/train_step.c: time of
one training step (zero_grad, forward, cross-entropy, backward, optimizer
step, loss.item()) for the same MLP (batch 128) and MNIST CNN (batch 64,
with dropout), fp32, on random pre-generated data cycled over a few batches.

  usage: torch_train_step.py [--model mlp|cnn|all] [--steps N] [--warmup N]
                             [--threads N (2)] [--optimizer adamw|sgd]

Prints, like the C benchmark (20 warm-up steps by default, as there):
  RESULT torch <model> batch=B steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=.. samples_per_s=..
         final_loss=L
(L: the loss of the last step, %.9g; its own initialization, so it is not
tessel's, but torch_ddp.py's MLP must end where this one ends).
Run it with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp (as
bench/run_train_step.sh does) so BLAS does not start its own extra threads.
"""
import argparse
import time

import torch
from torch import nn

N_BATCHES = 4


def build(model):
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                             nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128),
                         nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))


def make_optimizer(params, optimizer):
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, weight_decay=0.01, foreach=True)
    # foreach=True: the multi-tensor update, 2x faster than 1.13's default
    # per-parameter loop on the MLP (6.3 vs 12.1 ms per step here).
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)


def batches(b):
    """N_BATCHES random global batches of b samples: x (N, b, 1, 28, 28), y (N, b)."""
    xs = torch.rand(N_BATCHES, b, 1, 28, 28) * 2 - 0.5
    ys = torch.arange(N_BATCHES * b).reshape(N_BATCHES, b) * 7 % 10
    return xs, ys


def time_steps(net, opt, xs, ys, steps, warmup):
    """Median, 25th and 75th percentile ms of one training step over the batches,
    and the last step's loss."""
    ms = []
    last = float("nan")
    for t in range(warmup + steps):
        t0 = time.perf_counter()
        k = t % N_BATCHES
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(xs[k]), ys[k])
        loss.backward()
        opt.step()
        last = loss.item()
        if t >= warmup:
            ms.append(1e3 * (time.perf_counter() - t0))
    ms.sort()
    return ms[steps // 2], ms[steps // 4], ms[(3 * steps) // 4], last


def bench(model, b, steps, warmup, optimizer):
    torch.manual_seed(1)
    net = build(model).train()
    opt = make_optimizer(net.parameters(), optimizer)
    xs, ys = batches(b)
    med, p25, p75, last = time_steps(net, opt, xs, ys, steps, warmup)
    print(f"RESULT torch {model} batch={b} steps={steps} warmup={warmup} median_ms={med:.3f} p25_ms={p25:.3f} "
          f"p75_ms={p75:.3f} samples_per_s={1e3 * b / med:.1f} final_loss={last:.9g}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn", "all"], default="all")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.model != "cnn":
        bench("mlp", 128, a.steps or 100, a.warmup, a.optimizer)
    if a.model != "mlp":
        bench("cnn", 64, a.steps or 30, a.warmup, a.optimizer)


if __name__ == "__main__":
    main()
