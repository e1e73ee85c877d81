#!/usr/bin/env bash
# run_ckpt_ab.sh A_BUILD B_BUILD [DIR] — bench/run_ckpt.sh on two builds,
# interleaved in one invocation (A B A B ... for PASSES passes, default 2),
# under nice, with the load (uptime) before each run; then each run's SUMMARY
# and step-wait line. MODELS (default gpt), ROUNDS (3) and PRIOS (low) pass through.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
a="${1:?usage: run_ckpt_ab.sh A_BUILD B_BUILD [DIR]}" b="${2:?usage: run_ckpt_ab.sh A_BUILD B_BUILD [DIR]}"
dir="${3:-/tmp/tessel_bench_ckpt_ab}"
log=()
for pass in $(seq 1 "${PASSES:-2}"); do
  for side in A B; do
    build=$a
    [ "$side" = B ] && build=$b
    echo "== pass $pass $side ($build); uptime: $(uptime)"
    out=$(MODELS="${MODELS:-gpt}" ROUNDS="${ROUNDS:-3}" PRIOS="${PRIOS:-low}" nice bash "$here/run_ckpt.sh" "$build" "$dir")
    echo "$out"
    log+=("pass $pass $side: $(echo "$out" | grep -E '^step wait' | tr '\n' ' ')")
    log+=("pass $pass $side: $(echo "$out" | grep -E '^SUMMARY' | tr '\n' ' ')")
  done
done
echo "== A/B"
printf '%s\n' "${log[@]}"
