#!/usr/bin/env python3
"""replay_autoshard.py LOG [BUILD_DIR] — bench/run_autoshard.sh's REPLAY=LOG:
re-predicts every row of an earlier run_autoshard.sh log with this build's
cost model and that run's calibration (the lines the log printed), against
that run's measured steps. Measures nothing: a change to the model is checked
on a quiet run's numbers while the machine is busy (the rows' pred/meas moved
by the model alone). Logs written before stop 30 printed part of the
calibration (the kernel rates, overheads, all-reduce terms): the rest is
derived as tessel plan --calibrate writes it (flops_per_s from kernel.matmul,
memory_bytes_per_s from kernel.elementwise, the host links from allreduce.2,
the CPU, threads and cores from the log's lines). An auto row is solved again:
when the model change moves the solver's choice, its prediction is of another
plan than the one measured (compare the hand rows).
SET="key=value ...": those calibration keys replaced before the replay (the
rows' sensitivity to one term: which term puts a row outside the bounds).
The P-process rows are predicted with --processes P: with the log's
allreduce.procsP.* lines (logs from stop 36 on), else (SET may add them, or
PROCS_CAL=FILE: a calibration file's allreduce.procs* and
step_overhead.procs* lines added) as P devices of one process."""
import json, math, os, re, subprocess, sys, tempfile

if len(sys.argv) < 2:
    sys.exit("usage: replay_autoshard.py LOG [BUILD_DIR]")
log = sys.argv[1]
build = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build")
tessel = os.path.join(build, "tessel")
if not os.access(tessel, os.X_OK):
    sys.exit("replay_autoshard.py: no %s (build first)" % tessel)
text = open(log).read()

# the calibration: the log's "  key = value" lines (not the AB_BUILD side's "  old: ")
keys = {}
for line in text.split("\n"):
    m = re.match(r"^  ([a-z][\w.]*) = (.*)$", line)
    if m and m.group(1) not in keys:
        keys[m.group(1)] = m.group(2)
if "kernel.matmul" not in keys:
    sys.exit("replay_autoshard.py: %s has no calibration lines (not a run_autoshard.sh log?)" % log)
num = lambda k: keys[k].split("#")[0].strip()
cal = re.search(r"^calibrated in [\d.]+ s \((.*), (\d+) threads\)", text, re.M)
cores = re.search(r"^load at start: .*\((\d+) cores\)", text, re.M)
derived = {"name": "replayed calibration of %s" % os.path.basename(log),
           "calibration.cpu": cal.group(1) if cal else "unknown",
           "calibration.threads": cal.group(2) if cal else "1",
           "cores": cores.group(1) if cores else (cal.group(2) if cal else "1"),
           "flops_per_s.f32": num("kernel.matmul"), "flops_per_s.bf16": num("kernel.matmul"),
           "memory_bytes_per_s": num("kernel.elementwise") if "kernel.elementwise" in keys else "1e10",
           "devices_per_host": "4096"}
if "allreduce.2.bytes_per_s" in keys:
    derived["host_link_bytes_per_s"] = num("allreduce.2.bytes_per_s")
    derived["host_link_latency_s"] = num("allreduce.2.latency_s")
for k, v in derived.items():
    keys.setdefault(k, v)
# PROCS_CAL=FILE: the processes' keys of another calibration (an older log has none)
if os.environ.get("PROCS_CAL"):
    for line in open(os.environ["PROCS_CAL"]):
        m = re.match(r"^((?:allreduce|step_overhead)\.procs\d[\w.]*) = ([^#\s]+)", line)
        if m:
            keys.setdefault(m.group(1), m.group(2))
# SET="key=value ...": those calibration keys replaced (or added) before the
# replay: how far one term moves the rows (e.g. SET=shared_efficiency.2=1)
changed = []
for kv in os.environ.get("SET", "").split():
    k, sep, v = kv.partition("=")
    try:
        float(v)
    except ValueError:
        sep = ""
    if not sep or not re.match(r"^[a-z][\w.]*$", k):
        sys.exit("replay_autoshard.py: SET: '%s' is not key=number" % kv)
    changed.append("%s %s -> %s" % (k, num(k) if k in keys else "(unset)", v))
    keys[k] = v
tmp = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
tmp.write("".join("%s = %s\n" % kv for kv in keys.items()))
tmp.close()

# the rows: model mesh plan meas_ms pred_ms ...
row = re.compile(r"^(\w+)\s+(\d+proc|[\d,]+)\s+(hand|auto)\s+([\d.]+|nan)\s+([\d.]+|nan)\s", re.M)
rows, out = row.findall(text), []
print("replaying %d rows of %s with %s (calibration: %d keys of the log, %d derived)" % (
    len(rows), log, tessel, len(keys) - sum(k in derived for k in keys), sum(k in derived for k in keys)))
for c in changed:
    print("SET %s" % c)
print("%-9s %-6s %-5s %9s %9s %9s %9s %9s" % ("model", "mesh", "plan", "meas_ms", "then_ms", "then/meas", "now_ms",
                                              "now/meas"))
for model, shape, plan, meas, then in rows:
    meas, then = float(meas), float(then)
    second = "fsdp" if model in ("cnn", "resnet20") else "model"
    if shape.endswith("proc"):  # the processes' links: the log's allreduce.procsP.* (none before stop 36: as one process)
        mesh = ["--mesh", "data=" + shape[:-4], "--processes", shape[:-4]]
    elif shape == "1":
        mesh = []
    elif plan == "hand":
        d = shape.split(",")
        mesh = ["--mesh", "data=%s" % d[0] + (",%s=%s" % (second, d[1]) if len(d) > 1 else "")]
    else:
        d = shape.split(",")
        mesh = ["--mesh", "a=%s" % d[0] + (",b=%s" % d[1] if len(d) > 1 else ""), "--auto-shard"]
    env = dict(os.environ, TESSEL_CALIBRATION="none")
    r = subprocess.run([tessel, "inspect", "--model", model] + mesh + ["--device", tmp.name, "--json"],
                       capture_output=True, text=True, env=env)
    try:
        now = json.loads(r.stdout)["predicted"]["step_ms"]
    except (ValueError, KeyError):
        now = float("nan")
        print("  %s %s %s: inspect failed: %s" % (model, shape, plan, r.stderr.strip()[-200:]))
    out.append((meas, then, now))
    ratio = lambda p: p / meas if meas > 0 else float("nan")
    print("%-9s %-6s %-5s %9.2f %9.2f %9.2f %9.2f %9.2f" % (model, shape, plan, meas, then, ratio(then), now, ratio(now)),
          flush=True)
os.unlink(tmp.name)
within = lambda i: sum(0.75 <= r[i] / r[0] <= 1.25 for r in out if r[0] > 0 and not math.isnan(r[i]))
print("pred/meas within 0.75..1.25: now %d of %d rows (the log's model: %d)" % (within(2), len(out), within(1)))
