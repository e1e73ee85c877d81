#!/usr/bin/python3
"""onednn_least.py — tessel's and PyTorch's oneDNN primitives side by side,
per shape, in least times: each side's ONEDNN_VERBOSE=1 log of R training
steps (bench/run_onednn_least.sh makes both), every `exec` line keyed by
(primitive, propagation, shape, src/weights dtype); a key run k*R times
(k >= 1) is a per-step primitive, the rest (compile-time, warm-up-only,
PyTorch's fp32 FLOP-count forward) are left out. ms per step of a key =
k x its least time over the log: on a loaded host a primitive's least time
over R >= 5 runs is near its unloaded time, where sums and medians are not.

  usage: onednn_least.py TESSEL.log TORCH.log --runs R [--shapes] [--labels A,B]

--labels: the two logs' column names [tessel,PyTorch] (e.g. nchw,nhwc when
both logs are tessel's, bench/run_onednn_least.sh --versus layouts).

Prints per kind (conv fwd / bwd-data / bwd-weights, reorder, matmul) the two
sides' ms per step and the difference (> 0: tessel loses), and with --shapes
one line per convolution shape and direction with each side's
implementation (oneDNN's impl string), count per step and least ms.
"""
import argparse
import re
from collections import defaultdict

_EXEC = re.compile(r"^(?:onednn|dnnl)_verbose,exec,cpu,([a-z_]+),([^,]*),([a-z_]+),([^,]*),([^,]*),([^,]*),([^,]*),([0-9.]+)\s*$")


def parse(path, runs):
    """{(kind, prop, shape, dtypes): [impl, count per step, least ms]}"""
    seen = defaultdict(lambda: [set(), 0, float("inf")])
    with open(path, errors="replace") as f:
        for line in f:
            m = _EXEC.match(line.strip())
            if not m:
                continue
            kind, impl, prop, mds, _, _, shape, ms = m.groups()
            dts = "/".join(md.split("::")[0].split("_", 1)[-1] for md in mds.split()[:2])
            if kind == "reorder":
                shape = " -> ".join(md.split(":")[-2] for md in mds.split()[:2]) + " " + shape
            e = seen[(kind, prop, shape, dts)]
            e[0].add(impl)
            e[1] += 1
            e[2] = min(e[2], float(ms))
    out = {}
    for key, (impls, n, least) in seen.items():
        if n >= runs and n % runs == 0:
            out[key] = ["+".join(sorted(impls)), n // runs, least]
    return out


def group(key):
    kind, prop = key[0], key[1]
    if kind == "convolution":
        return {"forward_training": "conv fwd", "backward_data": "conv bwd-data",
                "backward_weights": "conv bwd-weights"}.get(prop, "conv other")
    return kind


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tessel")
    ap.add_argument("torch")
    ap.add_argument("--runs", type=int, required=True, help="training steps in each log")
    ap.add_argument("--shapes", action="store_true")
    ap.add_argument("--labels", default="tessel,PyTorch", help="the two logs' names in the table")
    a = ap.parse_args()
    side = {"tessel": parse(a.tessel, a.runs), "torch": parse(a.torch, a.runs)}
    tot = defaultdict(lambda: defaultdict(float))
    for s, d in side.items():
        for key, (_, k, least) in d.items():
            tot[group(key)][s] += k * least
    la, lb = (a.labels.split(",") + ["", ""])[:2]
    print(f"{'oneDNN primitives, ms/step (least)':36s} {la:>8s} {lb:>8s} {'diff':>8s}")
    for g in sorted(tot):
        t, p = tot[g]["tessel"], tot[g]["torch"]
        print(f"  {g:34s} {t:8.2f} {p:8.2f} {t - p:+8.2f}")
    t = sum(v["tessel"] for v in tot.values())
    p = sum(v["torch"] for v in tot.values())
    print(f"  {'all':34s} {t:8.2f} {p:8.2f} {t - p:+8.2f}")
    if a.shapes:
        keys = sorted({k[:3] for d in side.values() for k in d if k[0] == "convolution"}, key=lambda k: (k[1], k[2]))
        for k3 in keys:
            cells = []
            for s in ("tessel", "torch"):
                hit = [(k, v) for k, v in side[s].items() if k[:3] == k3]
                cells.append("  ".join(f"{v[0]} x{v[1]} {v[2]:.3f}" for _, v in hit) or "-")
            print(f"SHAPE {k3[1]:17s} {k3[2]:60s} {la}: {cells[0]:40s} {lb}: {cells[1]}")


if __name__ == "__main__":
    main()
