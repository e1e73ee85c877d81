#!/usr/bin/env bash
# calib_probe_cold.sh BUILD_DIR — bench_calib_ew_probe's --cold K and --fill
# (the calibration's elementwise probe with its pages' accessed bits cleared
# before run K, docs/checkpoints.md) run: K - 1 runs, the "|" mark with the
# advised MiB, the rest; with --fill too. The slowdown after the mark (all-zero
# mask loads walking the page tables) is printed, not checked: the fix is the
# kernel's (fused_mask.c) and the ratio depends on the host.
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
  echo "  $fill: $(cat "$tmp/out")"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
