#!/usr/bin/env bash
# predict_procs.sh BUILD_DIR — the prediction of a mesh spread over processes
# of this host (issue 16: the 3-process rows of bench/run_autoshard.sh ran
# 0.74 of a prediction that priced them as one process's devices). On a
# fixed, hand-written calibration (nothing measured, deterministic):
#  - without the allreduce.procsP.* keys, --processes P predicts what one
#    process does (today's prediction); --processes 1 too;
#  - with allreduce.procs3.step_wait_s = 10 ms (and the other process keys
#    equal to the in-process entry's) and a core per device (cores = 3), the
#    MLP's data=3 step over 3 processes is exactly 10 ms longer (its first
#    collective waits it), in `tessel inspect --device` and `tessel plan
#    --device`; on 2 cores (the processes take turns: 2 turns where the
#    compute is priced at 1.5 of a device's alone) it waits the turns'
#    excess, a third of its compute since the previous step's last
#    collective (all of the MLP's: its only collectives over processes, two
#    all-gathers, start the step), when that is less than step_wait_s;
#  - allreduce.procs3.cached_bytes_per_s prices the collectives moving at
#    most cache_bytes (all of the MLP's data=3 ones): 10x slower than
#    bytes_per_s, the step grows by exactly the bytes sent x (1/cached -
#    1/bytes_per_s); without cache_bytes, or below the collectives' bytes,
#    the key changes nothing;
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
fixed_calibration "$tmp/base.txt"
cat >>"$tmp/base.txt" <<EOF
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
{ cat "$tmp/base.txt"; echo "$procs"; echo "allreduce.procs3.busy_s = 1e-9"; echo "allreduce.procs3.step_wait_s = 1e-2"; } >"$tmp/turns.txt"
sed 's/^cores = 2$/cores = 3/' "$tmp/turns.txt" >"$tmp/step.txt" # a core per device: no turns
sed 's/^cores = 2$/cores = 3/' "$tmp/base.txt" >"$tmp/base3.txt"
sed 's/step_wait_s = 1e-2/step_wait_s = 1e-5/' "$tmp/turns.txt" >"$tmp/turns_small.txt"
{ cat "$tmp/base.txt"; echo "$procs"; echo "allreduce.procs3.busy_s = 1e-3"; } >"$tmp/busy.txt"
{ cat "$tmp/busy.txt"; echo "allreduce.procs3.busy_after_s = 1e3"; } >"$tmp/after.txt"
{ cat "$tmp/base.txt"; echo "$procs"; echo "allreduce.procs3.busy_s = 1e-9"; } >"$tmp/fast.txt"
{ cat "$tmp/base.txt"; sed 's/bytes_per_s = 5e9/bytes_per_s = 5e8/' <<<"$procs"; echo "allreduce.procs3.busy_s = 1e-9"; } >"$tmp/slow.txt"
{ cat "$tmp/fast.txt"; echo "allreduce.procs3.cached_bytes_per_s = 5e8"; } >"$tmp/cached_nokey.txt"
{ cat "$tmp/cached_nokey.txt"; echo "cache_bytes = 4194304"; } >"$tmp/cached.txt"
{ cat "$tmp/cached_nokey.txt"; echo "cache_bytes = 256"; } >"$tmp/cached_small.txt"
{ cat "$tmp/fast.txt"; echo "cache_bytes = 4194304"; } >"$tmp/fast_cache.txt"

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
check "--processes 1 is one process's prediction" "a == b" "$one" "$(ms "$tmp/turns.txt" data=3 --processes 1)"
one3=$(ms "$tmp/base3.txt" data=3)
check "step_wait_s 10 ms, a core per device: the step's first collective waits it" "abs(b - a - 10) < 1e-3" "$one3" "$(ms "$tmp/step.txt" data=3 --processes 3)"
compute=$(timeout -k 5 60 "$tessel" inspect --model mlp --mesh data=3 --device "$tmp/turns.txt" --processes 3 --json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["compute_ms"])')
turns=$(ms "$tmp/turns.txt" data=3 --processes 3)
check "3 processes on 2 cores: the step's first collective waits the turns' excess, a third of the compute ($compute ms)" \
  "abs(b - a - $compute / 3) < 1e-3 and b - a < 10" "$one" "$turns"
check "3 processes on 2 cores, step_wait_s 0.01 ms below the turns' excess: it waits step_wait_s" "abs(b - a - 0.01) < 1e-4" \
  "$one" "$(ms "$tmp/turns_small.txt" data=3 --processes 3)"
p=$(timeout -k 5 60 "$tessel" plan --model mlp --mesh data=3 --device "$tmp/step.txt" --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])')
pp=$(timeout -k 5 60 "$tessel" plan --model mlp --mesh data=3 --device "$tmp/step.txt" --processes 3 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])')
check "tessel plan --processes 3 too" "abs(b - a - 10) < 1e-3" "$p" "$pp"
busy=$(ms "$tmp/busy.txt" data=3 --processes 3)
check "busy_s 1 ms: each collective waits 1 ms" "b - a >= 0.999 and abs((b - a) - round(b - a)) < 1e-3" "$one" "$busy"
check "busy_after_s 1000 s: the wait scales with the compute before it" "0 <= b - a < 1e-3" "$one" "$(ms "$tmp/after.txt" data=3 --processes 3)"
fast=$(ms "$tmp/fast.txt" data=3 --processes 3)
check "process links 10x slower: a longer step" "b > a" "$fast" "$(ms "$tmp/slow.txt" data=3 --processes 3)"
sent=$(timeout -k 5 60 "$tessel" inspect --model mlp --mesh data=3 --device "$tmp/cached.txt" --processes 3 --json |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["comm_bytes_per_device"])')
check "cached_bytes_per_s 10x slower, collectives within cache_bytes: longer by the bytes sent ($sent) at it" \
  "abs(b - a - $sent * (1 / 5e8 - 1 / 5e9) * 1e3) < 1e-4 and b > a" "$(ms "$tmp/fast_cache.txt" data=3 --processes 3)" \
  "$(ms "$tmp/cached.txt" data=3 --processes 3)"
check "cached_bytes_per_s without cache_bytes: no change" "a == b" "$fast" "$(ms "$tmp/cached_nokey.txt" data=3 --processes 3)"
check "cached_bytes_per_s, collectives above cache_bytes: no change" "a == b" "$fast" \
  "$(ms "$tmp/cached_small.txt" data=3 --processes 3)"

expect processes_zero 2 "--processes '0'" inspect --model mlp --mesh data=3 --processes 0
expect processes_word 2 "--processes 'two'" inspect --model mlp --mesh data=3 --processes two
expect processes_uneven 2 "--processes 2: the mesh's 3 devices" inspect --model mlp --mesh data=3 --processes 2
expect plan_processes_uneven 2 "--processes 4: the mesh's 6 devices" plan --model mlp --mesh data=6 --processes 4
{ cat "$tmp/base.txt"; echo "allreduce.procs3.busy_s = -1"; } >"$tmp/badval.txt"
expect procs_bad_value 2 "allreduce.procs3.busy_s = '-1'" plan --model mlp --mesh data=3 --device "$tmp/badval.txt"
{ cat "$tmp/base.txt"; echo "allreduce.procs3.cached_bytes_per_s = 0"; } >"$tmp/badcached.txt"
expect procs_bad_cached 2 "allreduce.procs3.cached_bytes_per_s = '0'" plan --model mlp --mesh data=3 --device "$tmp/badcached.txt"
{ cat "$tmp/base.txt"; echo "allreduce.procs9.busy_s = 1"; } >"$tmp/badkey.txt"
expect procs_bad_key 2 "unknown key 'allreduce.procs9.busy_s'" plan --model mlp --mesh data=3 --device "$tmp/badkey.txt"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
