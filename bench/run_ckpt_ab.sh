#!/usr/bin/env bash
# run_ckpt_ab.sh A_BUILD B_BUILD [DIR] — bench/run_ckpt.sh for two builds
# interleaved in one invocation (B A B A ... per model: load drifts between
# runs, so each A run sits between B runs), each run's SUMMARY kept.
#   MODELS="gpt resnet50" (default); PAIRS=1 (B A pairs per model, then one more B
#   so A is bracketed); ROUNDS (3), PRIOS (low), ENV_A / ENV_B: extra
#   environment for A's / B's runs (e.g. ENV_B="TESSEL_CKPT_SNAPSHOT=hold").
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
a="$1" b="$2" dir="${3:-/tmp/tessel_bench_ckpt_ab}"
out=()
tmp=$(mktemp) || exit 2
run() { # run SIDE MODEL: one run_ckpt.sh of that side's build, its output shown, its SUMMARY kept
  local side=$1 model=$2 build envs
  if [ "$side" = A ]; then build=$a envs=${ENV_A:-}; else build=$b envs=${ENV_B:-}; fi
  echo "=== $model $side ($build ${envs})"
  env $envs MODELS=$model ROUNDS=${ROUNDS:-3} PRIOS=${PRIOS:-low} bash "$here/run_ckpt.sh" "$build" "$dir" >"$tmp" 2>&1
  cat "$tmp"
  out+=("$side $(grep -m1 '^SUMMARY' "$tmp")")
}
for model in ${MODELS:-gpt resnet50}; do
  for ((k = 0; k < ${PAIRS:-1}; k++)); do
    run B "$model"
    run A "$model"
  done
  run B "$model"
done
rm -f "$tmp"
echo "== A/B summary (B A ... B per model, in run order)"
printf '%s\n' "${out[@]}"
