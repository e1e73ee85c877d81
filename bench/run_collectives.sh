#!/usr/bin/env bash
# run_collectives.sh [BUILD_DIR (build/)] [flags for bench_collectives]
# Runs the collectives benchmark (BUILD_DIR/bench_collectives: all-reduce,
# all-gather, reduce-scatter over 2/4/8 device threads next to a 2-thread
# memcpy), then the key row — a 64 MiB f32 all-reduce on 2 devices, target
# <= 12 ms — for $ROUNDS more rounds (default 3), printing each round's median
# and the memcpy of the same run: on a shared machine the least disturbed
# round is the one to read.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
bin="$build/bench_collectives"
if [ ! -x "$bin" ]; then
  echo "run_collectives.sh: no $bin (build first: cmake -S . -B build && make -C build)" >&2
  exit 2
fi
"$bin" "$@"
echo "key row, ${ROUNDS:-3} more rounds:"
for _ in $(seq "${ROUNDS:-3}"); do
  "$bin" -m 64M -M 64M -d 2 -r 21 | grep "^64 MiB"
done
