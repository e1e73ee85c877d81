#!/usr/bin/env bash
# ckpt_hold_ab.sh BUILD_DIR — bench_ckpt_io --hold-ab (bench/run_hold_ab.sh's
# measurement of what holding the state costs a training step, issue 13)
# runs: plain and held steps of the MLP interleaved, every pair reported, and
# one RESULT line with positive medians.
set -u
build="${1:?usage: ckpt_hold_ab.sh BUILD_DIR}"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
check() { # check NAME COMMAND...: ok when COMMAND succeeds
  local name="$1"
  shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
rc=0
TESSEL_NUM_THREADS=2 timeout -k 5 300 "$build/bench_ckpt_io" --model mlp --hold-ab 3 >"$tmp/out" 2>"$tmp/err" || rc=$?
check "bench_ckpt_io --hold-ab exits 0 (exit $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || head -c 2000 "$tmp/err"
line=$(grep '^RESULT hold_ab mlp ' "$tmp/out")
check "one RESULT hold_ab line" [ "$(grep -c '^RESULT hold_ab mlp ' "$tmp/out")" -eq 1 ]
check "three pairs reported, plain and held" [ "$(grep -c '^hold_ab pair [1-3] \(plain\|held \):' "$tmp/err")" -eq 6 ]
for k in plain_s held_s plain_cpu_s held_cpu_s; do
  v=$(echo "$line" | sed -n "s/.* $k=\([0-9.]*\).*/\1/p")
  check "$k is a positive number ('$v')" /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" "${v:-x}"
done
check "pairs=3" grep -q ' pairs=3$' <<<"$line"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
