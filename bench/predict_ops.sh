#!/usr/bin/env bash
# predict_ops.sh [BUILD_DIR (build/)] — where the cost model misprices a step
# (issue 16): per op name, device 0's measured kernel time per step (tessel
# train --trace, the training steps after WARMUP) against the prediction of
# the same compiled program (tessel inspect --json "ops", the calibration
# cache or TESSEL_CALIBRATION), with kernel counts, most measured time first.
# A row's pred/meas far from the step's own says which op class is mispriced.
# With a MESH, a line before the table says where device 0's step went: its
# collectives' time per step (kernels waiting for the group included) against
# the predicted exposed communication, and every device's kernel time summed
# (on fewer cores than devices, the work the cores time-share; issue 16's
# 8 devices on 2 cores).
# PROCS=N: the same over N mpirun processes of one device and one thread each
# (MESH data=N unless given; process 0's trace, its device against the
# prediction of one process's N devices): whether the GPT's 2-process step
# (0.72 of its prediction in stop 29, 2 devices of one process 0.87) loses its
# time in kernels or in collectives, and how many of its collectives run on
# the collective worker (comm/async.c) rather than in line.
# Environment: MODEL (gpt), MESH (none: 1 device; e.g. data=2), BATCH (the model's), STEPS (8),
# WARMUP (5), CALIBRATE=1 (tessel plan --calibrate into a scratch file first),
# NODES=N: then device 0's N slowest kernels, each matched to its node of the
# program (tessel inspect's listing, in the order the device runs it): op,
# shape, a fused kernel's instructions and the bytes it moves per second (what
# found the GELU gradient's fused kernel at a quarter of the GELU's rate).
# LEAST=1: also each kernel's least time over the steps, summed per op, and the
# least execute (a loaded machine's estimate of the quiet step's kernels).
# Run it on a quiet machine: on a loaded one short kernels wait for a core
# (fork and join) far more than long ones, which skews the shares.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
tessel="$build/tessel"
[ -x "$tessel" ] || { echo "predict_ops.sh: no $tessel (build first)" >&2; exit 2; }
model=${MODEL:-gpt} steps=${STEPS:-8} warmup=${WARMUP:-5}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ "${CALIBRATE:-}" = 1 ]; then
  export TESSEL_CALIBRATION="$tmp/calibration.txt"
  "$tessel" plan --calibrate "$TESSEL_CALIBRATION" >/dev/null || exit 1
fi
mesh=() launch=()
[ -n "${PROCS:-}" ] && : "${MESH:=data=$PROCS}" && launch=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  TESSEL_NUM_THREADS=1 "${MPIRUN:-mpirun}" -n "$PROCS" --oversubscribe --bind-to none)
[ -n "${MESH:-}" ] && mesh=(--mesh "$MESH")
extra=(--eval-batch 1000)
[ "$model" = gpt ] && extra=(--eval-batches 1 --sample 0)
case $model in resnet18 | resnet50) extra=(--dataset synthetic --eval-batch 8) ;; esac # natural shapes, as inspect prices
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
${launch[@]+"${launch[@]}"} "$tessel" train --model "$model" ${BATCH:+--batch "$BATCH"} ${mesh[@]+"${mesh[@]}"} --steps $((steps + warmup)) --epochs 1 "${extra[@]}" \
  --trace "$tmp/trace.json" >"$tmp/train.out" 2>&1 || { echo "predict_ops.sh: train failed: $(tail -2 "$tmp/train.out")" >&2; exit 1; }
"$tessel" inspect --model "$model" ${BATCH:+--batch "$BATCH"} ${mesh[@]+"${mesh[@]}"} --json >"$tmp/pred.json" 2>"$tmp/pred.err" ||
  { echo "predict_ops.sh: inspect failed: $(cat "$tmp/pred.err")" >&2; exit 1; }
: >"$tmp/prog.txt"
if [ "${NODES:-0}" -gt 0 ]; then
  "$tessel" inspect --model "$model" ${BATCH:+--batch "$BATCH"} ${mesh[@]+"${mesh[@]}"} --no-graph >"$tmp/prog.txt" 2>&1 ||
    { echo "predict_ops.sh: inspect failed: $(tail -2 "$tmp/prog.txt")" >&2; exit 1; }
fi
/usr/bin/python3 - "$tmp/trace.json" "$tmp/pred.json" "$warmup" "$tmp/prog.txt" "${NODES:-0}" "${PROCS:-}" <<'PY'
import collections, json, os, re, statistics, sys
trace, pred, warm = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
procs = sys.argv[6]  # several processes: the trace is process 0's (its one device)
prog, slowest = open(sys.argv[4]).read().split("\n"), int(sys.argv[5])
ev = re.compile(r'\{"name":"([^"]*)","cat":"(kernel|execute|collective)","ph":"X","pid":(\d+),"tid":(\d+),"ts":([\d.]+),"dur":([\d.]+)')
execs, kernels, colls, others = [], [], [], []  # others: every device's kernels (ts, dur)
starts = []  # device 0's collectives started on its collective worker (not in line)
for line in open(trace):
    m = ev.search(line)
    if not m: continue
    name, cat, pid, tid, ts, dur = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), float(m.group(5)), float(m.group(6))
    if cat == "execute" and pid == 1: execs.append((ts, ts + dur))
    elif cat == "kernel" and pid == 0 and tid == 0 and not name.endswith(" (start)"): kernels.append((ts, name, dur))
    if cat == "collective" and pid == 0 and tid == 0: colls.append((ts, dur))
    if cat == "kernel" and pid == 0: others.append((ts, dur))
    if cat == "kernel" and pid == 0 and tid == 0 and name.endswith(" (start)"): starts.append((ts, dur))
execs.sort()
per = [collections.Counter() for _ in execs]; cnt = [collections.Counter() for _ in execs]
seq = [[] for _ in execs]  # each execute's kernels in order: (name, ms)
j = 0
for ts, name, dur in sorted(kernels):
    while j < len(execs) and execs[j][1] < ts: j += 1
    if j < len(execs) and execs[j][0] <= ts:
        per[j][name] += dur / 1e3; cnt[j][name] += 1; seq[j].append((name, dur / 1e3))
# the training step's executes: the most kernels (evaluation runs another, smaller program)
n = [sum(c.values()) for c in cnt]
top = max(n) if n else 0
steps = [i for i in range(len(execs)) if n[i] == top][warm:]
if not steps: sys.exit("predict_ops.sh: no training step after the warm-up in the trace")
names = set().union(*(cnt[i] for i in steps))
meas = {k: statistics.median(per[i][k] for i in steps) for k in names}
exe = statistics.median(execs[i][1] - execs[i][0] for i in steps) / 1e3
ops = pred.get("ops", {})
print("measured: %d steps, median execute %.2f ms (device 0 kernels %.2f ms); predicted step %.2f ms, compute %.2f ms"
      % (len(steps), exe, sum(meas.values()), pred["predicted"]["step_ms"], pred["predicted"]["compute_ms"]))
def within(evs, i):  # (count, ms) of the events starting inside execute i
    e = [d for ts, d in evs if execs[i][0] <= ts <= execs[i][1]]
    return len(e), sum(e) / 1e3
if colls and procs:  # over processes: device 0's collectives (with its waits for the other processes)
    print("process 0's device: collectives %d per step, %.2f ms (predicted exposed %.2f ms, as %s devices of one "
          "process), %.0f per step started on the collective worker (median; the prediction, as one process, runs them in line)" % (
              within(colls, steps[0])[0], statistics.median(within(colls, i)[1] for i in steps),
              pred["predicted"]["comm_ms"], procs, statistics.median(within(starts, i)[0] for i in steps)))
elif colls:  # several devices: where device 0's step went, against the predicted compute and exposed communication
    nc = within(colls, steps[0])[0]
    cm = statistics.median(within(colls, i)[1] for i in steps)
    allk = statistics.median(within(others, i)[1] for i in steps)
    print("device 0 collectives: %d per step, %.2f ms (predicted exposed %.2f ms); every device's kernels %.2f ms "
          "together (the cores' work; / %d cores: %.2f ms)" % (nc, cm, pred["predicted"]["comm_ms"], allk,
          os.cpu_count(), allk / os.cpu_count()))
print("%-24s %7s %7s %10s %10s %9s" % ("op", "n_meas", "n_pred", "meas_ms", "pred_ms", "pred/meas"))
for k in sorted(set(meas) | set(ops), key=lambda k: -meas.get(k, 0)):
    m, p = meas.get(k, 0.0), ops.get(k, {}).get("ms", 0.0)
    print("%-24s %7d %7d %10.3f %10.3f %9s" % (k, cnt[steps[0]].get(k, 0), ops.get(k, {}).get("count", 0), m, p,
          "%.2f" % (p / m) if m > 0 else "-"))
# LEAST=1: per op, the sum over its kernels of each kernel's least time over the
# steps (the k-th kernel of every step is the same node): on a loaded machine a
# kernel preempted in one step runs alone in another, so this estimates the
# quiet step's kernels (the calibration's rates are least times too); and the
# least execute against them: what the device spends outside its kernels.
if os.environ.get("LEAST") == "1":
    runs = [i for i in steps if [n for n, _ in seq[i]] == [n for n, _ in seq[steps[0]]]]
    least = collections.Counter()
    for k, (name, _) in enumerate(seq[steps[0]]):
        least[name] += min(seq[i][k][1] for i in runs)
    fast = min(runs, key=lambda i: execs[i][1] - execs[i][0])  # the fastest step, its own kernels
    exe_min, own = (execs[fast][1] - execs[fast][0]) / 1e3, sum(d for _, d in seq[fast])
    print("LEAST over %d steps: kernels %.3f ms (each its least); the fastest execute %.3f ms, its kernels %.3f ms, "
          "outside them %.3f ms; predicted step %.3f ms" % (len(runs), sum(least.values()), exe_min, own, exe_min - own,
                                                           pred["predicted"]["step_ms"]))
    for k in sorted(least, key=lambda k: -least[k]):
        p = ops.get(k, {}).get("ms", 0.0)
        print("  least %-20s %10.3f ms  pred %10.3f ms  pred/least %s" % (k, least[k], p, "%.2f" % (p / least[k]) if least[k] > 0 else "-"))
if slowest > 0:  # the program's kernels in order: "%N = op(args) ... : dtype[shape]", a fused kernel's "  iK = op" lines
    shapes, nodes = {}, []
    size = lambda dt, sh: {"f32": 4, "i32": 4, "i64": 8, "bf16": 2}.get(dt, 4) * eval("*".join(sh.split(",")) or "1")
    for line in prog:
        m = re.match(r"^%(\d+) = (\w+)(?:\(([^)]*)\))?.*: (\w+)\[([\d,]*)\]$", line)
        if m:
            shapes[m.group(1)] = size(m.group(4), m.group(5))
            if m.group(2) not in ("input", "constant", "reshape", "all_reduce", "all_gather", "reduce_scatter",
                                  "all_to_all", "collective_permute"):  # collectives: not kernels
                args = [a.strip().lstrip("%") for a in (m.group(3) or "").split(",") if a.strip()]
                nodes.append([m.group(2), "%%%s %s[%s]" % (m.group(1), m.group(4), m.group(5)), [],
                              shapes[m.group(1)] + sum(shapes.get(a, 0) for a in args)])
        elif nodes and re.match(r"^  i\d+ = (\w+)", line):
            nodes[-1][2].append(re.match(r"^  i\d+ = (\w+)", line).group(1))
    runs = [i for i in steps if [n for n, _ in seq[i]] == [n[0] for n in nodes]]
    if not runs:
        print("NODES: the program listing does not match the traced kernels (%d nodes)" % len(nodes))
    else:
        t = [statistics.median(seq[i][k][1] for i in runs) for k in range(len(nodes))]
        print("the %d slowest kernels of %d (median of %d steps):" % (slowest, len(nodes), len(runs)))
        for k in sorted(range(len(nodes)), key=lambda k: -t[k])[:slowest]:
            op, what, ins, b = nodes[k]
            print("  %-8.3f ms %-18s %-28s %7.2f GB/s  %s" % (t[k], op, what, b / t[k] / 1e6,
                  "+".join(sorted(set(ins))) if ins else ""))
PY
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
