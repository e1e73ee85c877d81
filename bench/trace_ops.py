#!/usr/bin/python3
"""trace_ops.py — tessel's kernels by category from a Chrome trace (--trace or
TESSEL_TRACE): the kernel events ("cat":"kernel") inside the last N "execute"
events (the timed steps; the earlier ones are compile, warm-up, evaluation),
summed by kernel name and put in the categories of bench/torch_op_profile.py.

  usage: trace_ops.py TRACE.json --steps N [--label 'resnet50 amp=bf16'] [--names] [--least]

Prints one line per category (and with --names one per kernel name):
  PROFILE tessel <label> cat=<category> ms_per_step=X
--least: each kernel of the step (by position, 1 thread) at its least time
over the N steps, "(step)" the least step. "fused" is tessel's fused elementwise programs (batch norm, ReLU, residual
adds, the optimizer, loss); PyTorch has these as separate ops.
"""
import argparse
import json
from collections import defaultdict

CATEGORY = {"conv2d": "conv_fwd", "conv2d_bwd_data": "conv_bwd_data", "conv2d_bwd_filter": "conv_bwd_filter",
            "max_pool2d": "pool_fwd", "max_pool2d_grad": "pool_bwd", "avg_pool2d": "pool_fwd",
            "avg_pool2d_grad": "pool_bwd", "dot_general": "linear", "convert": "convert",
            "transpose": "convert", "fused": "fused", "reduce": "reduce"}


def kernel_ms(events, steps):
    """{kernel name: ms per step} over the last `steps` execute events."""
    ex = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "execute"), key=lambda e: e["ts"])
    if len(ex) < steps:
        raise SystemExit(f"trace_ops.py: --steps {steps} but the trace has {len(ex)} execute events")
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in ex[len(ex) - steps:]]
    tot = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and any(a <= e["ts"] < b for a, b in spans):
            tot[e["name"]] += e["dur"] / 1e3 / steps
    tot["(step)"] = sum(b - a for a, b in spans) / 1e3 / steps
    return tot


def kernel_least_ms(events, steps):
    """{kernel name: ms per step} where each of a step's kernels (the i-th
    kernel event of every timed step, by start time) counts its least time
    over the steps: on a loaded host nearer the unloaded time than a sum."""
    ex = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "execute"), key=lambda e: e["ts"])
    if len(ex) < steps:
        raise SystemExit(f"trace_ops.py: --steps {steps} but the trace has {len(ex)} execute events")
    ks = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"])
    per_step = [[e for e in ks if s["ts"] <= e["ts"] < s["ts"] + s["dur"]] for s in ex[len(ex) - steps:]]
    names = [[e["name"] for e in st] for st in per_step]
    if any(n != names[0] for n in names):
        raise SystemExit("trace_ops.py: --least needs the same kernel sequence in every step (1 thread)")
    tot = defaultdict(float)
    for i, name in enumerate(names[0]):
        tot[name] += min(st[i]["dur"] for st in per_step) / 1e3
    tot["(step)"] = min(s["dur"] for s in ex[len(ex) - steps:]) / 1e3
    return tot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--names", action="store_true", help="also one line per kernel name")
    ap.add_argument("--least", action="store_true", help="each kernel's least time over the steps (1 thread)")
    a = ap.parse_args()
    if a.steps < 1:
        raise SystemExit(f"trace_ops.py: --steps must be >= 1, not {a.steps}")
    with open(a.trace) as f:
        events = json.load(f)["traceEvents"]
    by_name = (kernel_least_ms if a.least else kernel_ms)(events, a.steps)
    cats = defaultdict(float)
    for name, ms in by_name.items():
        cats[CATEGORY.get(name, "step" if name == "(step)" else "other")] += ms
    for cat, ms in sorted(cats.items()):
        print(f"PROFILE tessel {a.label} cat={cat} ms_per_step={ms:.3f}")
    if a.names:
        for name, ms in sorted(by_name.items(), key=lambda kv: -kv[1]):
            print(f"KERNEL tessel {a.label} name={name} ms_per_step={ms:.3f}")


if __name__ == "__main__":
    main()
