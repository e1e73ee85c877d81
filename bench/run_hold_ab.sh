#!/usr/bin/env bash
# run_hold_ab.sh [BUILD_DIR (build/)] — what holding the training state costs
# the GPT step by itself (no saver running): bench_ckpt_io --hold-ab, plain
# and held steps interleaved in one process, for each variant in VARIANTS
# (environment assignments, one word each; "-" = none), variants interleaved
# over PASSES passes (A B A B ...), under nice. A held step computes its
# updates into the spare memory (hold.c): its extra over the plain step is
# the out-of-place update's cost, apart from the saver's copy and writes.
#   VARIANTS="- TESSEL_FUSED_NT=1" PASSES=2 PAIRS=4 THREADS=1 MODEL=gpt GPT=L,D,H,T,V
# THREADS=1 by default: on a shared 2-core host the 1-thread process CPU
# seconds are the least load-sensitive number (2-thread steps under load
# spend their CPU spinning/waiting, not on the update).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
extra=()
[ -n "${GPT:-}" ] && extra=(--gpt "$GPT")
echo "uptime: $(uptime)"
for pass in $(seq 1 "${PASSES:-2}"); do
  for v in ${VARIANTS:--}; do
    envs=()
    [ "$v" != "-" ] && envs=("$v")
    out=$(env "${envs[@]}" TESSEL_NUM_THREADS="${THREADS:-1}" nice "$build/bench_ckpt_io" --model "${MODEL:-gpt}" \
          --hold-ab "${PAIRS:-4}" "${extra[@]}" 2>&1) || { echo "FAILED: $v"; echo "$out"; exit 1; }
    echo "pass $pass variant $v: $(echo "$out" | grep '^RESULT')"
  done
done
echo "uptime: $(uptime)"
