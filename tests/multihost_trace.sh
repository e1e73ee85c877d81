#!/usr/bin/env bash
# multihost_trace.sh BUILD_DIR — bench/run_mh_trace.sh's analysis (ANALYZE=DIR)
# counts only training steps: on a made-up rank trace of 4 steps (each runs
# a kernel and one 4.7 MB reduce-scatter) followed by bench_train_step's
# ar_ms probe (executes of one all-reduce of the gradient's bytes and no
# other kernel, as long as a step: the CNN at 1 Gbit/s), the last STEPS=4
# executes are the 4 steps: the reduce-scatter at 1.0 per step and no
# all-reduce (before, half of the CNN's "steps" were probes). No run, no
# network: under a second.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp/rank0.json" <<'PY'
import json, sys
ev, t = [], 0.0
def x(name, cat, ts, dur, pid=0, **args):
    ev.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": 0, "ts": ts, "dur": dur, "args": args})
for i in range(4):  # training steps: 50 ms, a kernel and a reduce-scatter
    x("execute", "execute", t, 50000, pid=1)
    x("dot_general", "kernel", t + 100, 1000)
    x("reduce_scatter (start)", "kernel", t + 1200, 10)
    x("ReduceScatter", "collective", t + 1200, 20000, bytes=4718592)
    t += 51000
for i in range(3):  # the probe: one all-reduce, 45 ms, no compute
    x("execute", "execute", t, 45000, pid=1)
    x("all_reduce", "kernel", t + 10, 44000)
    x("AllReduce", "collective", t + 10, 44000, bytes=4799528)
    t += 46000
json.dump({"traceEvents": ev}, open(sys.argv[1], "w"))
PY
out=$(ANALYZE="$tmp" STEPS=4 bash "$here/../bench/run_mh_trace.sh" "${1:-$here/../build}" 2>&1)
echo "$out"
fail=0
grep -Eq 'ReduceScatter +4718592 B +1\.0/step' <<<"$out" || { echo "FAIL: the reduce-scatter is not at 1.0 per step"; fail=1; }
grep -q 'AllReduce' <<<"$out" && { echo "FAIL: the ar_ms probe's all-reduce counted as a step's"; fail=1; }
grep -q 'step median 50.0 ms' <<<"$out" || { echo "FAIL: the step median is not the training steps' 50 ms"; fail=1; }
[ $fail = 0 ] && echo "multihost_trace: ok"
exit $fail
