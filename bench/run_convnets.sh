#!/usr/bin/env bash
# run_convnets.sh [BUILD_DIR (build/)] [extra flags for both benchmarks, e.g. --model resnet50 --amp bf16]
# The ResNet training step, tessel (BUILD_DIR/bench_convnet_step) next to
# PyTorch (bench/torch_convnet_step.py) in one invocation: ResNet-20 CIFAR
# b128, ResNet-18 CIFAR b32, ResNet-50 224 b8, each in fp32 and bf16 (tessel
# --amp bf16 = ts_compile_options.autocast; PyTorch torch.autocast CPU bf16),
# SGD momentum, 2 threads each. The two sides alternate for $ROUNDS rounds
# (default 2); the table keeps per side and configuration the round with the
# lowest median (the least disturbed). Columns: ms per step (median, IQR),
# samples/s, tessel/PyTorch throughput ratio (> 1: tessel faster), achieved
# GFLOP/s (3 x forward conv+linear FLOPs, counted by the PyTorch side, over
# the median step) against the 232 (fp32) / 465 (bf16) GFLOP/s peaks of
# ../shared/peer-baselines.md, bf16/fp32 speed-up per side, and memory: tessel's
# plan (temporaries) and peak RSS, PyTorch's peak RSS.
# Defaults: ResNet-20/18 3 warm-up + 20 timed steps, ResNet-50 2 + 8 (as
# peer-baselines.md). A quick smoke run: run_convnets.sh build --steps 1 --warmup 0 --batch 2
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
. "$here/prologue.bash"
bench_prologue run_convnets.sh bench_convnet_step torch
rounds="${ROUNDS:-2}"
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: tessel ..." >&2
  TESSEL_NUM_THREADS=2 "$bin" --threads 2 "$@" | tee -a "$tmp/tessel.txt" >&2
  echo "round $r/$rounds: PyTorch ..." >&2
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
    /usr/bin/python3 "$here/torch_convnet_step.py" --threads 2 "$@" | tee -a "$tmp/torch.txt" >&2
done

/usr/bin/python3 - "$tmp/tessel.txt" "$tmp/torch.txt" "$rounds" <<'PY'
import sys
def load(path):
    out = {}
    for line in open(path):
        if line.startswith("RESULT "):
            f = line.split()
            r = dict(kv.split("=", 1) for kv in f[3:] if "=" in kv)
            key = (f[2], r["amp"])
            if key not in out or float(r["median_ms"]) < float(out[key]["median_ms"]):
                out[key] = r
    return out
ts, pt = load(sys.argv[1]), load(sys.argv[2])
peak = {"none": 232.0, "bf16": 465.0}
print(f"best of {sys.argv[3]} rounds; ms per step: median (IQR); GFLOP/s = 3 x forward conv+linear FLOPs / median")
print(f"{'model':<9} {'amp':<5} {'batch':>5} | {'tessel ms (IQR)':>26} {'smp/s':>8} {'GFLOP/s':>13} | "
      f"{'PyTorch ms (IQR)':>26} {'smp/s':>8} {'GFLOP/s':>13} | {'tessel/PT':>9} | "
      f"{'tessel plan/RSS MiB':>19} {'PT RSS MiB':>10}")
for m in ("resnet20", "resnet18", "resnet50"):
    for amp in ("none", "bf16"):
        if (m, amp) not in ts or (m, amp) not in pt:
            continue
        a, b = ts[(m, amp)], pt[(m, amp)]
        gf = float(b.get("gflop_per_step", 0)) * float(a["batch"]) / float(b["batch"])
        def col(r):
            med = float(r["median_ms"])
            g = gf / (med / 1e3) if med > 0 else 0.0
            return (f"{med:9.1f} ({float(r['p25_ms']):.1f}-{float(r['p75_ms']):.1f})",
                    f"{float(r['samples_per_s']):8.1f}", f"{g:6.0f} ({100 * g / peak[amp]:3.0f}%)")
        ta, tb = col(a), col(b)
        ratio = float(a["samples_per_s"]) / float(b["samples_per_s"]) if float(b["samples_per_s"]) > 0 else 0
        print(f"{m:<9} {amp:<5} {a['batch']:>5} | {ta[0]:>26} {ta[1]} {ta[2]:>13} | {tb[0]:>26} {tb[1]} {tb[2]:>13} | "
              f"{ratio:8.2f}x | {a['arena_mib']:>9}/{a['rss_mib']:<9} {b['rss_mib']:>10}")
for side, d in (("tessel", ts), ("PyTorch", pt)):
    for m in ("resnet20", "resnet18", "resnet50"):
        if (m, "none") in d and (m, "bf16") in d and float(d[(m, "bf16")]["median_ms"]) > 0:
            print(f"{side} {m}: bf16/fp32 speed-up "
                  f"{float(d[(m, 'none')]['median_ms']) / float(d[(m, 'bf16')]['median_ms']):.2f}x")
PY
