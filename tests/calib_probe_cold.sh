#!/usr/bin/env bash
# calib_probe_cold.sh BUILD_DIR — bench_calib_ew_probe's --cold K and --fill
# (the calibration's elementwise probe with its pages' accessed bits cleared
# before run K, docs/checkpoints.md) run: K - 1 runs, the "|" mark with the
# advised MiB, the rest; with --fill too. After the mark, the runs' CPU time
# (median of runs 2-4 after it) stays within 1.4x of the runs' before it (runs
# 2-4): ReLU's gradient reads its zero-masked operands' pages with plain loads
# too (nan_touch, kernels/nan_order.h). Without that, all-zero mask loads walk
# the page tables on every access: 1.7-1.8x the CPU time on this host's EPYC
# (a CPU that takes no such walks passes either way).
set -u
build="${1:?usage: calib_probe_cold.sh BUILD_DIR}"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
check() { # check NAME COMMAND...: ok when COMMAND succeeds
  local name="$1"
  shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
for fill in "" --fill; do
  rc=0
  TESSEL_NUM_THREADS=1 timeout -k 5 120 "$build/bench_calib_ew_probe" 1024 1024 8 --cold 5 $fill >"$tmp/out" 2>"$tmp/err" || rc=$?
  check "probe --cold 5 $fill exits 0 (exit $rc)" [ "$rc" -eq 0 ]
  [ "$rc" -eq 0 ] || head -c 2000 "$tmp/err"
  before=$(sed 's/|.*//' "$tmp/out" | grep -o '[0-9.]*/[0-9.]*' | wc -l)
  after=$(sed -n 's/.*cold) //p' "$tmp/out" | grep -o '[0-9.]*/[0-9.]*' | wc -l)
  mib=$(sed -n 's/.*| (\([0-9]*\) MiB cold).*/\1/p' "$tmp/out")
  check "$fill: 4 runs, the mark, 4 runs ($before, $after)" [ "$before" -eq 4 -a "$after" -eq 4 ]
  check "$fill: the device blocks advised (${mib:-none} MiB >= 12)" [ "${mib:-0}" -ge 12 ]
  # CPU ms of each run (wall/CPU pairs): runs 2-4 before the mark, runs 2-4 after it
  ratio=$(python3 -c '
import sys
pre, post = sys.stdin.read().split("|")
cpu = lambda t: [float(w.split("/")[1]) for w in t.split() if "/" in w]
a, b = sorted(cpu(pre)[1:4]), sorted(cpu(post)[1:4])
print("%.2f" % (b[1] / a[1]) if len(a) == 3 and len(b) == 3 and a[1] > 0 else "none")' <"$tmp/out" 2>/dev/null)
  check "$fill: CPU time after the mark / before, median of runs 2-4 ($ratio) < 1.4" \
    awk -v r="${ratio:-none}" 'BEGIN { exit !(r ~ /^[0-9.]+$/ && r + 0 < 1.4) }'
  echo "  $fill: $(cat "$tmp/out")"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
