#!/usr/bin/env bash
# run_train_gaps.sh [BUILD_DIR (build/)] — the time `tessel train` spends
# between its training steps over two hosts (issue 17): two namespace hosts
# (tests/netns.bash; needs root) on a link limited to RATE (1gbit) with tc
# tbf, `tessel train --model MODEL (cnn) --parallel PAR (ddp) --steps 40
# --threads 1 --trace` over them (one process per host), and from rank 0's
# trace the gaps between consecutive training executes (the first 40; the
# evaluation's after them): median, max, how many over 5 ms, their sum, next
# to the executes' median. A step loop that waits between executes (e.g. for
# a blocking exchange queued behind a collective the step left in flight)
# shows here; bench_train_step, which has no such loop, cannot show it.
# A/B: AB_BUILD=DIR runs DIR's tessel too, alternating (A B) for ROUNDS (3).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
[ -x "$build/tessel" ] || { echo "run_train_gaps.sh: no $build/tessel (build first: scripts/build.sh build)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run_train_gaps.sh: needs root (network namespaces)" >&2; exit 2; }
. "$here/../tests/netns.bash"
netns_start 2 run_train_gaps.sh
netns_rate "${RATE:-1gbit}" || { echo "run_train_gaps.sh: tc tbf failed: $netns_error" >&2; exit 2; }
sides=(B)
[ -n "${AB_BUILD:-}" ] && sides=(A B)
status=0
for r in $(seq 1 "${ROUNDS:-3}"); do
  for side in "${sides[@]}"; do
    b="$build"
    [ "$side" = A ] && b="$(cd "$AB_BUILD" && pwd)"
    trace="$tmp/trace_$side$r.json"
    if ! timeout -k 10 300 env TESSEL_NUM_THREADS=1 "${mpi[@]}" --hostfile "$tmp/hostfile2" -n 2 -x TESSEL_NUM_THREADS \
        "$b/tessel" train --model "${MODEL:-cnn}" --threads 1 --steps 40 --eval-batch 5000 --parallel "${PAR:-ddp}" \
        --profile --trace "$trace" > "$tmp/out_$side$r" 2>&1; then
      echo "run_train_gaps.sh: $side round $r failed:"; tail -5 "$tmp/out_$side$r"; status=1
    fi
    netns_kill
    [ -s "$trace" ] && /usr/bin/python3 - "$trace" "$side" "$r" <<'PY'
import json, statistics, sys
path, side, r = sys.argv[1:]
ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "execute"]
ex = sorted(ev, key=lambda e: e["ts"])[:40]
g = [(b["ts"] - a["ts"] - a["dur"]) / 1e3 for a, b in zip(ex, ex[1:])]
d = [e["dur"] / 1e3 for e in ex[1:]]
print(f"{side} round {r}: {len(ex)} step executes, median {statistics.median(d):.1f} ms; gaps between them, ms: "
      f"median {statistics.median(g):.2f}, max {max(g):.2f}, over 5 ms {sum(x > 5 for x in g)}, sum {sum(g):.1f}")
PY
  done
done
exit $status
