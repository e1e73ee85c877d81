#!/usr/bin/env bash
# ab_fused_time.sh BUILD_A BUILD_B [MODEL (resnet50)] [AMP (bf16)]
# The fused programs' time per step, A against B: traces of
# bench_convnet_step --threads 1 (TESSEL_NUM_THREADS=1, nice) alternate A B A B
# for $ROUNDS rounds (default 2), $STEPS steps each (default 5, 2 warm-up),
# then bench/fused_time.py --min --patterns per side (each kernel's least time
# over all of that side's steps: a loaded host's preemptions drop out) over
# `tessel inspect` of the same program (sgd, bench_convnet_step's batch:
# $BATCH, default 8 for resnet50, 32 for resnet18, else 128; B's inspect for
# both: the program is the same). Prints the final losses (A and B must agree when
# B keeps the bits) and per side the per-pattern table.
#   e.g. ROUNDS=2 bash bench/ab_fused_time.sh /work/main/build build resnet50 bf16
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: ab_fused_time.sh A_BUILD B_BUILD [model] [amp]" >&2; exit 2; }
a="$1" b="$2" model="${3:-resnet50}" amp="${4:-bf16}" steps="${STEPS:-5}"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
case "$model" in resnet50) bs=8 ;; resnet18) bs=32 ;; *) bs=128 ;; esac
bs="${BATCH:-$bs}"
"$b/tessel" inspect --model "$model" --batch "$bs" --optimizer sgd --amp "$amp" >"$tmp/F"
for r in $(seq "${ROUNDS:-2}"); do
  for side in A B; do
    dir="$a"; [ "$side" = B ] && dir="$b"
    line="$(TESSEL_NUM_THREADS=1 TESSEL_TRACE="$tmp/T_${side}_$r" nice "$dir/bench_convnet_step" --threads 1 \
      --model "$model" --batch "$bs" --amp "$amp" --steps "$steps" --warmup 2 2>/dev/null | grep '^RESULT')"
    echo "$side round $r: $(grep -o 'final_loss=[^ ]*' <<<"$line") $(grep -o 'cpu_median_ms=[^ ]*' <<<"$line") load=$(cut -d' ' -f1 /proc/loadavg)"
  done
done
for side in A B; do
  echo "== $side ($model, amp $amp, 1 thread)"
  /usr/bin/python3 "$here/fused_time.py" "$tmp/F" "$tmp"/T_"${side}"_* --steps "$steps" --min --patterns --top 0
done
