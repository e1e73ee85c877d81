#!/usr/bin/env bash
# perf_groups.sh BUILD_A [BUILD_B] [-- extra bench_convnet_step flags]
# Where one thread's CPU goes in the ResNet training step, by sampling (perf
# record, cpu-clock, 1999 Hz): BUILD/bench_convnet_step --threads 1 (default
# --model resnet20 --amp none --steps 20 --warmup 2), the last 60% of the
# samples (the timed steps; compile and warm-up come first), summed into
# groups: oneDNN's convolution kernels (conv; bf16's with their transposes
# jit_trans_*), its reorders (reorder), the
# fused programs and reductions with the copies they make (fused), the rest
# (reorders: the activations' moves, oneDNN's jit:blk kernels and blk16.c's
# transpositions; wreorder: the weights', oneDNN's jit:uni reorder kernels,
# OIHW into the layouts of the forward and backward-data convolutions and
# the filter gradient back out; bench/count_reorders.sh counts both).
# Samples count only while the process runs, so on a loaded host the shares
# move far less than wall times do: the convolutions are the same code on
# both sides, so fused/conv, reorder/conv and step/conv (all samples over the
# convolutions') compare two builds' work (A B A B ... for $ROUNDS rounds,
# default 2). Needs perf; oneDNN names its JIT kernels through
# ONEDNN_JIT_PROFILE=2 (a /tmp/perf-PID.map).
set -euo pipefail
a="$1"
shift
b=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then b="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(--model resnet20 --amp none --steps 20 --warmup 2)
command -v perf >/dev/null || { echo "perf_groups.sh: needs perf" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
one() { # label build
  local data="$tmp/$1.data"
  OMP_WAIT_POLICY=passive ONEDNN_JIT_PROFILE=2 TESSEL_NUM_THREADS=1 \
    perf record -q -F 1999 -o "$data" "$2/bench_convnet_step" --threads 1 "${flags[@]}" 2>/dev/null |
    grep -o "final_loss=[^ ]*\|cpu_median_ms=[^ ]*" | tr '\n' ' ' >"$tmp/res"
  perf report -i "$data" --no-children --sort sym -g none --time 40%-100% -F overhead,sym 2>/dev/null |
    /usr/bin/python3 -c '
import re, sys
g = {"conv": 0.0, "reorder": 0.0, "wreorder": 0.0, "fused": 0.0, "other": 0.0}
fused = ("__memmove_avx512_unaligned_erms", "tk_fast_run", "run_f32", "reduce_f32", "run_range", "finish")
for line in sys.stdin:
    m = re.match(r"\s*([0-9.]+)%\s+\[.\]\s+(\S+)", line)
    if not m:
        continue
    p, s = float(m.group(1)), m.group(2)
    if s.startswith(("jit_trans_", "_jit_avx512_core_bf16_")) or ("conv" in s and "kernel" in s): g["conv"] += p
    elif "single_blk" in s or s.startswith(("tk_blk16", "block_to", "block_from", "tr16x16")): g["reorder"] += p
    elif "jit_uni_reorder" in s: g["wreorder"] += p
    elif s in fused or s.startswith(("eval_", "load_src")): g["fused"] += p
    else: g["other"] += p
c = max(g["conv"], 1e-9)
fr, rr, wr = g["fused"] / c, g["reorder"] / c, g["wreorder"] / c
print(" ".join(f"{k}={v:.1f}%" for k, v in g.items()), f"fused/conv={fr:.3f}",
      f"reorder/conv={rr:.3f} wreorder/conv={wr:.3f} step/conv={100 / c:.3f}", end=" ")
'
  echo "$(cat "$tmp/res")"
}
for r in $(seq 1 "${ROUNDS:-2}"); do
  echo "round $r A: $(one A "$a")"
  [ -n "$b" ] && echo "round $r B: $(one B "$b")"
done
