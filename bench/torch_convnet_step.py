#!/usr/bin/python3
"""torch_convnet_step.py — the PyTorch side of bench/convnet_step.c: one
training step (zero_grad, forward, cross-entropy, backward, SGD-momentum
step, loss.item()) of ResNet-20 / ResNet-18 (3x32x32, 10 classes, batch 128 /
32) and ResNet-50 (3x224x224, 1000 classes, batch 8), fp32 or bf16 autocast
(torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss, as
../shared/peer-baselines.md measured it). The networks are those of
tests/torch_resnet.py (torchvision's layouts; Debian's torch has no
torchvision). Random data, 4 batches cycled.

  usage: torch_convnet_step.py [--model resnet20|resnet18|resnet50|all] [--amp none|bf16|all]
                               [--steps N] [--warmup N] [--threads N (2)] [--batch B]
                               [--profile N [--least]] [--channels-last]

--channels-last: model and input in torch.channels_last (NHWC) memory
format, PyTorch's counterpart of tessel's --layout nhwc (layout=nhwc in the
RESULT line; contiguous NCHW otherwise).

Prints per configuration, like the C side:
  RESULT torch <model> amp=<none|bf16> layout=<nchw|nhwc> batch=B steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=..
         samples_per_s=.. final_loss=L rss_mib=R gflop_per_step=F min_ms=.. cpu_min_ms=..
F = 3 x the forward FLOPs of the convolutions and the linear layer (2 per
multiply-add), counted with forward hooks: the FLOP count both sides'
GFLOP/s use. --profile N: then N more steps under torch.profiler, printed as
  PROFILE torch <model> amp=<none|bf16> cat=<category> ms_per_step=X
(bench/torch_op_profile.py: the categories; --least: each op at its least
time over the N steps, by position; bench/run_op_profile.sh puts them
next to tessel's kernels). Run with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp
(bench/run_convnets.sh does).
"""
import argparse
import os
import resource
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_resnet import ResNet  # noqa: E402
from torch_op_profile import OPT_LABEL, profile_steps  # noqa: E402

N_BATCHES = 4
SHAPES = {"resnet20": (3, 32, 10, 128, 20, 3), "resnet18": (3, 32, 10, 32, 20, 3),
          "resnet50": (3, 224, 1000, 8, 8, 2)}  # channels, size, classes, batch, steps, warm-up


def forward_flops(net, x):
    total = [0]

    def conv(m, inp, out):
        total[0] += 2 * out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]

    def lin(m, inp, out):
        total[0] += 2 * out.numel() * m.in_features

    hooks = [m.register_forward_hook(conv if isinstance(m, nn.Conv2d) else lin)
             for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        net(x)
    for h in hooks:
        h.remove()
    return total[0]


def bench(model, amp, b, steps, warmup, profile, least=False, channels_last=False):
    c, hw, classes, _, _, _ = SHAPES[model]
    torch.manual_seed(1)
    net = ResNet(model, c, classes).train()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt)  # before the optimizer: it holds the parameters as they end up
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    xs = [x.contiguous(memory_format=fmt) for x in torch.rand(N_BATCHES, b, c, hw, hw) * 2 - 1]
    ys = torch.arange(N_BATCHES * b).reshape(N_BATCHES, b) * 7 % classes
    flops = 3 * forward_flops(net, xs[0]) if b else 0
    ms, cpu, last, t = [], [], float("nan"), [0]

    def step():
        k = t[0] % N_BATCHES
        t[0] += 1
        opt.zero_grad(set_to_none=True)
        if amp == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(net(xs[k]), ys[k])
        else:
            loss = nn.functional.cross_entropy(net(xs[k]), ys[k])
        loss.backward()
        with torch.profiler.record_function(OPT_LABEL):
            opt.step()
        return loss.item()

    for i in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        last = step()
        if i >= warmup:
            ms.append(1e3 * (time.perf_counter() - t0))
            cpu.append(1e3 * (time.process_time() - c0))
    ms.sort()
    med, p25, p75 = (ms[steps // 2], ms[steps // 4], ms[(3 * steps) // 4]) if steps else (0, 0, 0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    layout = "nhwc" if channels_last else "nchw"
    print(f"RESULT torch {model} amp={amp} layout={layout} batch={b} steps={steps} warmup={warmup} median_ms={med:.3f} "
          f"p25_ms={p25:.3f} p75_ms={p75:.3f} samples_per_s={1e3 * b / med if med else 0:.2f} "
          f"final_loss={last:.9g} rss_mib={rss:.1f} gflop_per_step={flops / 1e9:.3f} "
          f"min_ms={min(ms) if ms else 0:.3f} cpu_min_ms={min(cpu) if cpu else 0:.3f}", flush=True)
    if profile:
        for cat, v in sorted(profile_steps(step, profile, least).items()):
            print(f"PROFILE torch {model} amp={amp} layout={layout} cat={cat} ms_per_step={v:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet20", "resnet18", "resnet50", "all"], default="all")
    ap.add_argument("--amp", choices=["none", "bf16", "all"], default="all")
    ap.add_argument("--steps", type=int, default=-1)
    ap.add_argument("--warmup", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="then N more steps under torch.profiler: ms per step per op category")
    ap.add_argument("--least", action="store_true",
                    help="with --profile: each op of the step at its least time over the N steps")
    ap.add_argument("--channels-last", action="store_true",
                    help="model and input in torch.channels_last memory format (NHWC)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for m in ("resnet20", "resnet18", "resnet50"):
        if a.model not in ("all", m):
            continue
        _, _, _, b, steps, warmup = SHAPES[m]
        for amp in ("none", "bf16"):
            if a.amp in ("all", amp):
                bench(m, amp, a.batch or b, steps if a.steps < 0 else a.steps, warmup if a.warmup < 0 else a.warmup,
                      a.profile, a.least, a.channels_last)


if __name__ == "__main__":
    main()
