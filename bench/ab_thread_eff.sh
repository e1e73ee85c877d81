#!/usr/bin/env bash
# ab_thread_eff.sh BUILD_A BUILD_B [bench_convnet_step flags (default --model resnet20 --amp bf16 --steps 8 --warmup 2)]
# A/B of a training step's 1- and 2-thread kernel times in least times: BUILD_A
# and BUILD_B's bench_convnet_step with TESSEL_TRACE, on 1 thread and on 2,
# interleaved (A1 B1 A2 B2, ...) for $ROUNDS rounds (default 3), under nice,
# the load beside each run. Then per build bench/thread_eff.py (each kernel
# position's least time over all rounds' timed steps; per kernel name 1 vs 2
# threads, speedup, efficiency, the $TOP (15) positions losing most to a
# perfect split), and per kernel name A vs B on 2 threads (B - A).
# Least times over many steps are what survives a loaded host; the final
# losses printed per run must match between A and B (same bits).
# KEEP=DIR keeps the traces there (A1.R.json, B2.R.json, ...).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/prologue.bash" # ab_step_args
ab_step_args "$@"
tmp="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp"/*.json "$KEEP"/; rm -rf "$tmp"' EXIT
for r in $(seq 1 "${ROUNDS:-3}"); do
  for t in 1 2; do
    for side in A B; do
      dir="$a"
      [ "$side" = B ] && dir="$b"
      echo -n "$side ${t}t round $r: "
      TESSEL_NUM_THREADS=$t TESSEL_TRACE="$tmp/$side$t.$r.json" nice "$dir/bench_convnet_step" --threads $t "${flags[@]}" \
        2>/dev/null | grep -o 'final_loss=[^ ]*\|median_ms=[^ ]*\|cpu_median_ms=[^ ]*' | tr '\n' ' '
      echo "(load $(cut -d' ' -f1 /proc/loadavg))"
    done
  done
done
for side in A B; do
  echo "== $side: 1 vs 2 threads"
  /usr/bin/python3 "$here/thread_eff.py" --one "$tmp/${side}1".*.json --many "$tmp/${side}2".*.json \
    --steps "$steps" --top "${TOP:-15}"
done
echo "== 2 threads: A vs B (least ms per step by kernel name)"
/usr/bin/python3 "$here/thread_eff.py" --one "$tmp/A2".*.json --many "$tmp/B2".*.json --steps "$steps" --ab \
  --top 0
