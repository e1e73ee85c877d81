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
# Layouts: --layout nchw|nhwc is tessel's (bench_convnet_step --layout; nhwc by
# default, as tessel train); --torch-layout nchw|nhwc|both is PyTorch's (nhwc: torch.channels_last
# model and input; both: the two alternate in every round and the table compares
# tessel against PyTorch's faster one per configuration, naming it and showing the
# other's median) [both]. A claim for tessel's nhwc compares against `both`.
# PyTorch's two layouts, stop 34 (nhwc15), indicative only (1 thread, load 7-16, 2 rounds
# interleaved contiguous / channels_last, the least step's process CPU ms, torch_convnet_step.py
# --threads 1 [--channels-last], ResNet-20/18 8 steps, ResNet-50 4): channels_last / contiguous
# ResNet-20 0.84 fp32 (364 / 431) and 0.76 bf16 (180 / 238), ResNet-18 0.97 (885 / 910) and 0.83
# (374 / 450), ResNet-50 0.93 (2311 / 2492) and 0.73 (1076 / 1469): PyTorch is faster channels-last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
. "$here/prologue.bash"
bench_prologue run_convnets.sh bench_convnet_step torch
rounds="${ROUNDS:-2}"
common=() ts_layout=(--layout nhwc) pt_layouts=both
while [ $# -gt 0 ]; do
  case "$1" in
    --layout) ts_layout=(--layout "${2:?--layout needs nchw or nhwc}"); shift 2 ;;
    --torch-layout) pt_layouts="${2:?--torch-layout needs nchw, nhwc or both}"; shift 2 ;;
    *) common+=("$1"); shift ;;
  esac
done
case "$pt_layouts" in
  nchw | nhwc) ;;
  both) pt_layouts="nchw nhwc" ;;
  *) echo "run_convnets.sh: --torch-layout '$pt_layouts': expected nchw, nhwc or both" >&2; exit 2 ;;
esac
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: tessel ${ts_layout[1]} ..." >&2
  TESSEL_NUM_THREADS=2 "$bin" --threads 2 "${ts_layout[@]}" "${common[@]}" | tee -a "$tmp/tessel.txt" >&2
  for pl in $pt_layouts; do
    cl=()
    [ "$pl" = nhwc ] && cl=(--channels-last)
    echo "round $r/$rounds: PyTorch $pl ..." >&2
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
      /usr/bin/python3 "$here/torch_convnet_step.py" --threads 2 "${cl[@]}" "${common[@]}" | tee -a "$tmp/torch.txt" >&2
  done
done

/usr/bin/python3 - "$tmp/tessel.txt" "$tmp/torch.txt" "$rounds" <<'PY'
import sys
def load(path, by_layout=False):
    out = {}
    for line in open(path):
        if line.startswith("RESULT "):
            f = line.split()
            r = dict(kv.split("=", 1) for kv in f[3:] if "=" in kv)
            r.setdefault("layout", "nchw")
            key = (f[2], r["amp"]) + ((r["layout"],) if by_layout else ())
            if key not in out or float(r["median_ms"]) < float(out[key]["median_ms"]):
                out[key] = r
    return out
ts, pt_all = load(sys.argv[1]), load(sys.argv[2], True)
pt, pt_other = {}, {}  # PyTorch's faster layout per configuration; the slower one's median
for (m, amp, lay), r in pt_all.items():
    if (m, amp) not in pt or float(r["median_ms"]) < float(pt[(m, amp)]["median_ms"]):
        if (m, amp) in pt:
            pt_other[(m, amp)] = pt[(m, amp)]
        pt[(m, amp)] = r
    else:
        pt_other[(m, amp)] = r
peak = {"none": 232.0, "bf16": 465.0}
print(f"best of {sys.argv[3]} rounds; ms per step: median (IQR); GFLOP/s = 3 x forward conv+linear FLOPs / median")
print("layouts: tessel's, PyTorch's faster one (the other's median ms after it, when measured)")
print(f"{'model':<9} {'amp':<5} {'batch':>5} | {'tessel ms (IQR)':>31} {'smp/s':>8} {'GFLOP/s':>13} | "
      f"{'PyTorch ms (IQR)':>31} {'smp/s':>8} {'GFLOP/s':>13} {'other':>12} | {'tessel/PT':>9} | "
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
            return (f"{r['layout']} {med:9.1f} ({float(r['p25_ms']):.1f}-{float(r['p75_ms']):.1f})",
                    f"{float(r['samples_per_s']):8.1f}", f"{g:6.0f} ({100 * g / peak[amp]:3.0f}%)")
        ta, tb = col(a), col(b)
        ratio = float(a["samples_per_s"]) / float(b["samples_per_s"]) if float(b["samples_per_s"]) > 0 else 0
        o = pt_other.get((m, amp))
        other = f"{o['layout']} {float(o['median_ms']):.1f}" if o else "-"
        print(f"{m:<9} {amp:<5} {a['batch']:>5} | {ta[0]:>31} {ta[1]} {ta[2]:>13} | {tb[0]:>31} {tb[1]} {tb[2]:>13} "
              f"{other:>12} | "
              f"{ratio:8.2f}x | {a['arena_mib']:>9}/{a['rss_mib']:<9} {b['rss_mib']:>10}")
for side, d in (("tessel", ts), ("PyTorch", pt)):
    for m in ("resnet20", "resnet18", "resnet50"):
        if (m, "none") in d and (m, "bf16") in d and float(d[(m, "bf16")]["median_ms"]) > 0:
            print(f"{side} {m}: bf16/fp32 speed-up "
                  f"{float(d[(m, 'none')]['median_ms']) / float(d[(m, 'bf16')]['median_ms']):.2f}x")
PY
