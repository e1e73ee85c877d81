#!/usr/bin/python3
"""trace_busy_devices.py — how many devices of one process compute at once
(issue 16: on 8 devices sharing 2 cores, a step's collectives wait for the
last device). From a Chrome trace of a multi-device run (TESSEL_TRACE or
tessel train --trace), for the last STEPS training steps (execute events of
at least --min-ms: ResNet-50's 8-device evaluation runs, 0.28 s, are left
out), the time during which 0, 1, 2 and 3 or more devices are
inside a kernel; with 0, every device is in a collective, with 1 the others
wait for that one (one core idle on a 2-core machine).

  usage: trace_busy_devices.py TRACE.json [--steps 3] [--min-ms 500]
  e.g.   TESSEL_TRACE=/tmp/r50.json build/tessel train --model resnet50 --dataset synthetic \\
             --eval-batch 8 --mesh data=8 --steps 6 --epochs 1
         bench/trace_busy_devices.py /tmp/r50.json
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("trace")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--min-ms", type=float, default=500)
a = ap.parse_args()
ev = json.load(open(a.trace))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
kern = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("pid") == 0]
steps = [e for e in ev if e.get("cat") == "execute" and e.get("dur", 0) >= a.min_ms * 1e3][-a.steps:]
for s in steps:
    t0, t1 = s["ts"], s["ts"] + s["dur"]
    edges = []
    for k in kern:
        b, e = max(k["ts"], t0), min(k["ts"] + k["dur"], t1)
        if b < e:
            edges += [(b, 1), (e, -1)]
    edges.sort()
    busy, last, at = 0, t0, [0.0] * 4
    for t, d in edges:
        at[min(busy, 3)] += t - last
        busy, last = busy + d, t
    at[min(busy, 3)] += t1 - last
    print(f"step {s['dur'] / 1e3:.0f} ms: devices in a kernel 0: {at[0] / 1e3:.0f} ms, 1: {at[1] / 1e3:.0f} ms, "
          f"2: {at[2] / 1e3:.0f} ms, 3+: {at[3] / 1e3:.0f} ms")
