#!/usr/bin/env bash
# run_gpt_tp.sh [BUILD_DIR (build/)] — the GPT's tensor-parallel throughput
# (issue 12: model=2 on 2 devices x 1 thread >= 0.9x the tokens/s of 1 device
# x 2 threads), side by side in one invocation, 2 cores in every row:
#   1dev     1 device x 2 threads                       (the reference)
#   tp2      --mesh model=2: 2 devices x 1 thread (Megatron: heads, MLP, vocab)
#   tp2-sp   --mesh model=2 --sequence-parallel
#   mpi-tp2  2 processes x 1 device x 1 thread, --mesh model=2 (mpirun)
# `tessel train --model gpt --dataset synthetic` with the issue's benchmark
# GPT (6 layers, d_model 256, 4 heads, seq 128, vocab 8192, batch 8, AdamW);
# each row's tokens/s is the "done:" line's (training steps only, compile
# excluded). Rounds alternate the rows ($ROUNDS, default 3); the best round
# per row is kept. Correctness: every row's logged step losses must equal
# 1dev's within 1e-4 relative (else exit 1).
# Environment: ROUNDS (3), STEPS (40), ARGS (replaces the model flags, e.g.
# ARGS="--layers 1 --d-model 32 --heads 4 --seq 16 --vocab 64 --batch 4" to
# smoke-test).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
tessel="$build/tessel"
[ -x "$tessel" ] || { echo "run_gpt_tp.sh: no $tessel (build first)" >&2; exit 2; }
rounds="${ROUNDS:-3}" steps="${STEPS:-40}"
read -r -a model <<<"${ARGS:---layers 6 --d-model 256 --heads 4 --seq 128 --vocab 8192 --batch 8}"
common=(train --model gpt --dataset synthetic "${model[@]}" --steps "$steps" --eval-every 100000 --eval-batches 1)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rows=(1dev tp2 tp2-sp)
command -v mpirun >/dev/null && rows+=(mpi-tp2)
row() { # row NAME ROUND: one run, its log in $tmp/NAME.ROUND.json, prints tokens/s
  local name="$1" r="$2" out="$tmp/$1.$2"
  case "$name" in
  1dev) TESSEL_NUM_THREADS=2 "$tessel" "${common[@]}" --log-json "$out.json" >"$out.txt" 2>&1 ;;
  tp2) TESSEL_NUM_THREADS=2 "$tessel" "${common[@]}" --mesh model=2 --log-json "$out.json" >"$out.txt" 2>&1 ;;
  tp2-sp) TESSEL_NUM_THREADS=2 "$tessel" "${common[@]}" --mesh model=2 --sequence-parallel --log-json "$out.json" \
    >"$out.txt" 2>&1 ;;
  mpi-tp2) TESSEL_NUM_THREADS=1 mpirun -n 2 --bind-to none --oversubscribe "$tessel" "${common[@]}" --mesh model=2 \
    --log-json "$out.json" >"$out.txt" 2>&1 ;;
  esac
  sed -n 's/.*(\([0-9.]*\) tokens\/s training).*/\1/p' "$out.txt" | tail -1
}
declare -A best
for ((r = 1; r <= rounds; r++)); do
  for name in "${rows[@]}"; do
    t="$(row "$name" "$r")"
    [ -n "$t" ] || { echo "run_gpt_tp.sh: $name failed: $(tail -3 "$tmp/$name.$r.txt")" >&2; exit 1; }
    echo "round $r $name: $t tokens/s" >&2
    if [ -z "${best[$name]:-}" ] || awk "BEGIN{exit !($t > ${best[$name]})}"; then best[$name]="$t"; fi
  done
done
status=0
printf "%-8s %12s %10s  %s\n" row tokens/s vs_1dev "loss curve vs 1dev (worst relative)"
for name in "${rows[@]}"; do
  check=$(/usr/bin/python3 - "$tmp/1dev.1.json" "$tmp/$name.1.json" <<'PY'
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
w = max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"{w:.3g} {'ok' if w <= 1e-4 else 'MISMATCH'}")
PY
)
  [[ "$check" == *MISMATCH* ]] && status=1
  printf "%-8s %12.0f %9.2fx  %s\n" "$name" "${best[$name]}" "$(awk "BEGIN{print ${best[$name]} / ${best[1dev]}}")" "$check"
done
exit $status
