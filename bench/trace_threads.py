#!/usr/bin/python3
"""trace_threads.py — what the second thread buys each kernel of a training
step (issue 16: the MLP's 1-device step ran 0.72 of its prediction): two
Chrome traces of the same 1-device run (tessel train --trace), one with
TESSEL_NUM_THREADS=1 and one with more threads; the steps (execute events)
with the most kernels, each kernel's least time over them by its position in
the step (the k-th kernel of every step is the same node; the least is a
loaded machine's estimate of the quiet time), side by side with the speedup.

  usage: trace_threads.py ONE_THREAD.json N_THREADS.json [--min-us 8]
  e.g.   for t in 1 2; do TESSEL_NUM_THREADS=$t build/tessel train --model mlp --steps 40 \\
             --epochs 1 --eval-batch 1000 --trace /tmp/tr$t.json; done
         bench/trace_threads.py /tmp/tr1.json /tmp/tr2.json

Prints the fastest step of each, every kernel of at least --min-us on one
thread (position, name, both least times, speedup) and the smaller ones summed.
"""
import argparse
import re

EV = re.compile(r'\{"name":"([^"]*)","cat":"(\w+)","ph":"X","pid":(\d+),"tid":(\d+),"ts":([\d.]+),"dur":([\d.]+)')


def steps(path):
    """(fastest execute us, [least us per kernel position], [names]) of the steps with the most kernels."""
    ev = [(m.group(1), m.group(2), float(m.group(5)), float(m.group(6)))
          for line in open(path) for m in EV.finditer(line)]
    ex = sorted((e for e in ev if e[1] == "execute"), key=lambda e: e[2])
    ks = sorted((e for e in ev if e[1] == "kernel" and not e[0].endswith(" (start)")), key=lambda e: e[2])
    runs, j = [], 0
    for name, _, t0, dur in ex:
        while j < len(ks) and ks[j][2] < t0:
            j += 1
        k = j
        inside = []
        while k < len(ks) and ks[k][2] <= t0 + dur:
            inside.append(ks[k])
            k += 1
        runs.append((dur, inside))
    top = max(len(r[1]) for r in runs)
    runs = [r for r in runs if len(r[1]) == top]
    if not runs or not top:
        raise SystemExit("trace_threads.py: %s has no step with kernels" % path)
    least = [min(r[1][i][3] for r in runs) for i in range(top)]
    return min(r[0] for r in runs), least, [k[0] for k in runs[0][1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("one")
    ap.add_argument("many")
    ap.add_argument("--min-us", type=float, default=8.0)
    a = ap.parse_args()
    e1, m1, n1 = steps(a.one)
    e2, m2, n2 = steps(a.many)
    if n1 != n2:
        raise SystemExit("trace_threads.py: the two traces' steps run different kernels (%d vs %d)" % (len(n1), len(n2)))
    print("fastest step: 1 thread %.1f us, N threads %.1f us; kernels' least times summed: %.1f / %.1f us"
          % (e1, e2, sum(m1), sum(m2)))
    for i, (name, a1, a2) in enumerate(zip(n1, m1, m2)):
        if a1 >= a.min_us:
            print("%3d %-14s 1 thread %8.1f us  N threads %8.1f us  speedup %.2f" % (i, name, a1, a2, a1 / a2))
    small = [i for i in range(len(n1)) if m1[i] < a.min_us]
    print("kernels under %g us on 1 thread: %d, %.1f us on 1 thread, %.1f us on N"
          % (a.min_us, len(small), sum(m1[i] for i in small), sum(m2[i] for i in small)))


if __name__ == "__main__":
    main()
