#!/usr/bin/env bash
# predict_procs.sh BUILD_DIR — the prediction of a mesh spread over processes
# of this host (issue 16: the 3-process rows of bench/run_autoshard.sh ran
# 0.74 of a prediction that priced them as one process's devices). On a
# fixed, hand-written calibration (nothing measured, deterministic):
#  - without the allreduce.procsP.* keys, --processes P predicts what one
#    process does (today's prediction); --processes 1 too;
#  - with allreduce.procs3.step_wait_s = 10 ms (and the other process keys
#    equal to the in-process entry's), the MLP's data=3 step over 3
#    processes is exactly 10 ms longer (its first collective waits it),
#    in `tessel inspect --device` and `tessel plan --device`;
#  - without step_wait_s and busy_s = 1 ms: every collective waits 1 ms (the
#    step grows by a whole number of ms, at least 1); with busy_after_s far
#    above the step's compute the wait scales down to almost nothing;
#  - slower process links (bytes_per_s / 10) lengthen the step;
#  - a bad --processes (0, not a number, not dividing the devices) is a
#    usage error naming the value; a bad procs key is an error naming it.
set -u
build="${1:?usage: predict_procs.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, expect
export TESSEL_NUM_THREADS=2 TESSEL_CALIBRATION=none
cat >"$tmp/base.txt" <<EOF
name = a fixed test calibration
calibration.cpu = test
calibration.threads = 2
cores = 2
kernel.matmul = 1e11
kernel.elementwise = 1e10
op_overhead_s = 1e-6
step_overhead.1_s = 1e-6
allreduce.2.bytes_per_s = 1e10
allreduce.2.latency_s = 1e-5
step_overhead.2_s = 1e-5
allreduce.4.bytes_per_s = 5e9
allreduce.4.latency_s = 2e-5
step_overhead.4_s = 2e-5
EOF
# the processes' links as the 4-device entry's (3 devices use it): only the waits differ
procs="allreduce.procs3.bytes_per_s = 5e9
allreduce.procs3.latency_s = 2e-5
step_overhead.procs3_s = 2e-5"
{ cat "$tmp/base.txt"; echo "$procs"; echo "allreduce.procs3.busy_s = 1e-9"; echo "allreduce.procs3.step_wait_s = 1e-2"; } >"$tmp/step.txt"
{ cat "$tmp/base.txt"; echo "$procs"; echo "allreduce.procs3.busy_s = 1e-3"; } >"$tmp/busy.txt"
{ cat "$tmp/busy.txt"; echo "allreduce.procs3.busy_after_s = 1e3"; } >"$tmp/after.txt"
{ cat "$tmp/base.txt"; echo "$procs"; echo "allreduce.procs3.busy_s = 1e-9"; } >"$tmp/fast.txt"
{ cat "$tmp/base.txt"; sed 's/bytes_per_s = 5e9/bytes_per_s = 5e8/' <<<"$procs"; echo "allreduce.procs3.busy_s = 1e-9"; } >"$tmp/slow.txt"

ms() { # ms CALIBRATION MESH [ARGS...]: inspect's predicted step (ms)
  local cal="$1" mesh="$2"
  shift 2
  timeout -k 5 60 "$tessel" inspect --model mlp --mesh "$mesh" --device "$cal" "$@" --json 2>"$tmp/insp.err" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])' 2>/dev/null || echo nan
}
check() { # check NAME PYTHON-EXPRESSION(a, b)
  if /usr/bin/python3 -c "import sys; a, b = $3, $4; sys.exit(not ($2))" 2>/dev/null; then ok "$1: $3 -> $4 ms"
  else bad "$1: $3 -> $4 ms ($2 does not hold)"; fi
}

one=$(ms "$tmp/base.txt" data=3)
check "no process keys: --processes 3 is one process's prediction" "a == b and a == a" "$one" "$(ms "$tmp/base.txt" data=3 --processes 3)"
check "--processes 1 is one process's prediction" "a == b" "$one" "$(ms "$tmp/step.txt" data=3 --processes 1)"
check "step_wait_s 10 ms: the step's first collective waits it" "abs(b - a - 10) < 1e-3" "$one" "$(ms "$tmp/step.txt" data=3 --processes 3)"
p=$(timeout -k 5 60 "$tessel" plan --model mlp --mesh data=3 --device "$tmp/step.txt" --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])')
pp=$(timeout -k 5 60 "$tessel" plan --model mlp --mesh data=3 --device "$tmp/step.txt" --processes 3 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])')
check "tessel plan --processes 3 too" "abs(b - a - 10) < 1e-3" "$p" "$pp"
busy=$(ms "$tmp/busy.txt" data=3 --processes 3)
check "busy_s 1 ms: each collective waits 1 ms" "b - a >= 0.999 and abs((b - a) - round(b - a)) < 1e-3" "$one" "$busy"
check "busy_after_s 1000 s: the wait scales with the compute before it" "0 <= b - a < 1e-3" "$one" "$(ms "$tmp/after.txt" data=3 --processes 3)"
check "process links 10x slower: a longer step" "b > a" "$(ms "$tmp/fast.txt" data=3 --processes 3)" "$(ms "$tmp/slow.txt" data=3 --processes 3)"

expect processes_zero 2 "--processes '0'" inspect --model mlp --mesh data=3 --processes 0
expect processes_word 2 "--processes 'two'" inspect --model mlp --mesh data=3 --processes two
expect processes_uneven 2 "--processes 2: the mesh's 3 devices" inspect --model mlp --mesh data=3 --processes 2
expect plan_processes_uneven 2 "--processes 4: the mesh's 6 devices" plan --model mlp --mesh data=6 --processes 4
{ cat "$tmp/base.txt"; echo "allreduce.procs3.busy_s = -1"; } >"$tmp/badval.txt"
expect procs_bad_value 2 "allreduce.procs3.busy_s = '-1'" plan --model mlp --mesh data=3 --device "$tmp/badval.txt"
{ cat "$tmp/base.txt"; echo "allreduce.procs9.busy_s = 1"; } >"$tmp/badkey.txt"
expect procs_bad_key 2 "unknown key 'allreduce.procs9.busy_s'" plan --model mlp --mesh data=3 --device "$tmp/badkey.txt"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
