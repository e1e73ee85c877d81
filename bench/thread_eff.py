#!/usr/bin/python3
"""thread_eff.py — where a training step loses 2-thread efficiency, from
Chrome traces (TESSEL_TRACE) of the same run on 1 thread and on N threads.

  usage: thread_eff.py --one T1.json [T1b.json ...] --many TN.json [TNb.json ...]
                       [--steps 8] [--threads 2] [--top 15]

Each trace's last --steps execute events are the timed steps; every kernel of
a step (by position: the k-th kernel of each step is the same node) counts its
least time over all steps of all traces of its side (a loaded host's estimate
of the quiet time). Prints per kernel name (class) the summed least times on 1
and N threads, the speedup and the parallel efficiency (t1 / (N tN)), and the
--top positions that lose the most time against a perfect split
(loss = tN - t1 / N), with their neighbours' names to place them in the step.
"""
import argparse
import json
from collections import defaultdict


def least_seq(paths, steps):
    """[(name, least ms)] per kernel position over the timed steps of paths."""
    runs = []
    for p in paths:
        ev = json.load(open(p))["traceEvents"]
        ex = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "execute"), key=lambda e: e["ts"])
        ks = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"
                     and not e["name"].endswith(" (start)")), key=lambda e: e["ts"])
        for s in ex[-steps:]:
            runs.append([(e["name"], e["dur"] / 1e3) for e in ks if s["ts"] <= e["ts"] < s["ts"] + s["dur"]])
    names = [n for n, _ in runs[0]]
    if any([n for n, _ in r] != names for r in runs):
        raise SystemExit("thread_eff.py: the steps run different kernel sequences")
    return [(names[i], min(r[i][1] for r in runs)) for i in range(len(names))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--one", nargs="+", required=True)
    ap.add_argument("--many", nargs="+", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--ab", action="store_true", help="A/B of one thread count: --one is A, --many is B "
                    "(columns A, B, A/B and B - A; --threads 1)")
    a = ap.parse_args()
    s1, sn = least_seq(a.one, a.steps), least_seq(a.many, a.steps)
    if [n for n, _ in s1] != [n for n, _ in sn]:
        raise SystemExit("thread_eff.py: the two sides run different kernel sequences")
    N = 1 if a.ab else a.threads
    cls = defaultdict(lambda: [0.0, 0.0, 0])
    for (name, t1), (_, tn) in zip(s1, sn):
        c = cls[name]
        c[0] += t1
        c[1] += tn
        c[2] += 1
    if a.ab:
        print(f"{'class (least ms/step)':24s} {'count':>5s} {'A':>9s} {'B':>10s} {'A/B':>8s} {'':>5s} {'B-A ms':>8s}")
    else:
        print(f"{'class (least ms/step)':24s} {'count':>5s} {'1 thread':>9s} {N:>2d} threads {'speedup':>8s} "
              f"{'eff':>5s} {'loss ms':>8s}")
    rows = sorted(cls.items(), key=lambda kv: -(kv[1][1] - kv[1][0] / N))
    for name, (t1, tn, cnt) in rows + [("all kernels", [sum(v[0] for v in cls.values()),
                                                         sum(v[1] for v in cls.values()), len(s1)])]:
        print(f"  {name:22s} {cnt:5d} {t1:9.2f} {tn:10.2f} {t1 / tn if tn else 0:8.2f} "
              f"{t1 / (N * tn) if tn else 0:5.2f} {tn - t1 / N:+8.2f}")
    if a.ab:
        return
    order = sorted(range(len(s1)), key=lambda i: -(sn[i][1] - s1[i][1] / N))[:a.top]
    print(f"top {a.top} positions by loss (tN - t1/N):")
    for i in order:
        ctx = " ".join(s1[j][0] for j in range(max(0, i - 2), min(len(s1), i + 3)) if j != i)
        print(f"  {i:4d} {s1[i][0]:18s} 1t {s1[i][1]:7.3f} {N}t {sn[i][1]:7.3f} speedup {s1[i][1] / sn[i][1]:5.2f} "
              f"loss {sn[i][1] - s1[i][1] / N:+6.3f}  [{ctx}]")
    small = [i for i in range(len(s1)) if s1[i][1] < 0.02]
    print(f"kernels under 20 us on 1 thread: {len(small)}, {sum(s1[i][1] for i in small):.2f} ms on 1 thread, "
          f"{sum(sn[i][1] for i in small):.2f} ms on {N}")


if __name__ == "__main__":
    main()
