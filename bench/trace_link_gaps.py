#!/usr/bin/python3
"""trace_link_gaps.py — the CNN's link cycle between 2 hosts, part by part
(issue 17): from a rank's trace of a data-parallel CNN step over 2 hosts
(bench/run_mh_trace.sh OUT=DIR: DIR/rank0.json), per step, fc1's all-gather
and reduce-scatter (the collectives over 1 MB) and the gaps between them:
  the all-gather's end -> the first large dot_general (the device's wake-up),
  the all-gather's end -> the reduce-scatter's start kernel (fc1's forward,
      fc2, fc1's weight gradient),
  the start kernel -> the reduce-scatter on the worker (its first byte: the
      worker's wake-up; comm/async.c hand_core),
  the reduce-scatter's end -> the next all-gather's start (the update);
their mean, median, 75th percentile and largest (ms).

  usage: trace_link_gaps.py RANK.json [...]
  e.g.   XENV=TESSEL_COMM_YIELD=0 MODEL=cnn PAR=ddp OUT=/tmp/off bash bench/run_mh_trace.sh build
         bench/trace_link_gaps.py /tmp/off/rank0.json
"""
import json
import statistics
import sys


def stats(v):
    if not v:
        return "-"
    s = sorted(v)
    return "mean %.2f med %.2f p75 %.2f max %.2f" % (statistics.mean(v), statistics.median(v), s[3 * len(s) // 4], s[-1])


for path in sys.argv[1:]:
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    xs = sorted((e for e in ev if e.get("ph") == "X"), key=lambda e: e["ts"])
    big = lambda e, name: e["cat"] == "collective" and e["name"] == name and e["args"]["bytes"] > 1e6
    ag = [e for e in xs if big(e, "AllGather")]
    rs = [e for e in xs if big(e, "ReduceScatter")]
    rs_start = [e for e in xs if e["cat"] == "kernel" and e["name"] == "reduce_scatter (start)"]
    dots = [e for e in xs if e["cat"] == "kernel" and e["name"] == "dot_general" and e["dur"] > 300]
    wake, to_rs, first_byte, update = [], [], [], []
    for a in ag:
        end = a["ts"] + a["dur"]
        d = [x for x in dots if x["ts"] >= end - 100]
        if d:
            wake.append((d[0]["ts"] - end) / 1e3)
        s = [x for x in rs_start if x["ts"] >= end]
        r = [x for x in rs if x["ts"] >= end]
        if s and r:
            to_rs.append((s[0]["ts"] - end) / 1e3)
            first_byte.append((r[0]["ts"] - s[0]["ts"]) / 1e3)
        nxt = [x for x in ag if x["ts"] > a["ts"]]
        if r and nxt:
            update.append((nxt[0]["ts"] - (r[0]["ts"] + r[0]["dur"])) / 1e3)
    print(f"{path}: {len(ag)} all-gathers")
    print("  all-gather end -> first large dot      ", stats(wake))
    print("  all-gather end -> reduce-scatter start ", stats(to_rs))
    print("  reduce-scatter start -> on the worker  ", stats(first_byte))
    print("  reduce-scatter end -> next all-gather  ", stats(update))
    print("  all-gather ms", stats([a["dur"] / 1e3 for a in ag]), "| reduce-scatter ms", stats([r["dur"] / 1e3 for r in rs]))
