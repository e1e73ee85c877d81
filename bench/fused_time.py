#!/usr/bin/python3
"""fused_time.py — tessel's memory-bound kernels node by node: the time of each
kernel of the step program (a trace's last N "execute" events, joined to the
program `tessel inspect` prints, in its order) next to the bytes it streams
(fused_bytes.py's count), and the rate that gives.

  BUILD/tessel inspect --model resnet50 --batch 8 --amp bf16 > F
  TESSEL_NUM_THREADS=2 TESSEL_TRACE=T BUILD/bench_convnet_step --threads 2 --model resnet50 --amp bf16 \
      --steps 3 --warmup 2
  bench/fused_time.py F T --steps 3 [--top 25]

The program's kernels run in node order, skipping inputs, constants and
reshapes (runtime/cpu_device.c), so the k-th kernel event of an execute is
the k-th such node. Prints one line per kind of memory-bound kernel (count,
ms per step, MiB per step, GB/s) and the --top slowest nodes with their
operand types: where a bf16 step still moves f32, and which programs run
far below the rate of the others (compute bound, or off the fast path).
"""
import argparse
import json
import re
from collections import defaultdict
from math import prod

SZ = {'f32': 4, 'bf16': 2, 'f16': 2, 'f64': 8, 'i32': 4, 'i64': 8, 'bool': 1, 'u8': 1, 'pred': 1}
SKIP = ('input', 'constant', 'reshape')


def program(path):
    """[(id, op, dtype, numel, args, body)] in order, from the inspect text."""
    text = open(path).read()
    prog = text[text.index('== program'):]
    nodes, cur = [], None
    for line in prog.splitlines()[1:]:
        if line.startswith('=='):
            break
        m = re.match(r'%(\d+) = (\w+)(?:\((.*?)\))?(.*): (\w+)\[([\d,]*)\]\s*$', line)
        if m:
            nid, op, args, rest, dt, shp = m.groups()
            n = prod(int(s) for s in shp.split(',') if s) if shp else 1
            cur = [int(nid), op, dt, n, args or "", rest, []]
            nodes.append(cur)
        elif cur is not None and line.startswith('  '):
            cur[6].append(line.strip())
    return nodes


def pattern(op, dt, n, stream, rest, body, refs, info):
    """What a kernel computes, by its op and program (--patterns)."""
    if op != 'fused':
        return op
    if stream < 65536:
        return 'small (< 64 Ki elements)'
    full = [r for r in refs if info[int(r)][1] == stream]
    if 'kind=' in rest:
        if any('mul(i2, i2)' in b for b in body):
            return 'bn variance'
        return 'bn mean' if 'kind=mean' in rest else f'bn grad sums ({len(full)} full inputs)'
    if any('compare' in b for b in body):
        return 'relu grad' + (' + add' if any(' add(' in b for b in body) else '')
    if sum(' sub(' in b for b in body) >= 3:
        return 'bn input grad'
    if any('max(' in b for b in body):
        return 'bn apply + relu' + (' (2 bn)' if len(full) >= 2 and len(refs) >= 9 else ' + residual' if len(full) >= 2 else '')
    if len(refs) >= 5:
        return 'bn apply'
    return f'other ({dt})'


def kernels(trace, steps):
    ev = json.load(open(trace))["traceEvents"]
    ex = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "execute"), key=lambda e: e["ts"])
    out = []
    for e in ex[len(ex) - steps:]:
        a, b = e["ts"], e["ts"] + e["dur"]
        out.append(sorted((k for k in ev if k.get("ph") == "X" and k.get("cat") == "kernel" and a <= k["ts"] < b),
                          key=lambda k: k["ts"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inspect")
    ap.add_argument("trace", nargs="+", help="one or more traces of the same program (--min: least over all)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--min", action="store_true",
                    help="each kernel's least time over the steps, not its mean (a loaded host's preemptions)")
    ap.add_argument("--patterns", action="store_true",
                    help="group the fused programs by what they compute (batch-norm apply, its gradient, ...)")
    ap.add_argument("--all", action="store_true", help="--top over every kernel, convolutions included")
    a = ap.parse_args()
    nodes = program(a.inspect)
    run = [n for n in nodes if n[1] not in SKIP]
    info = {n[0]: (n[2], n[3]) for n in nodes}
    per = defaultdict(list)
    for ks in (ks for t in a.trace for ks in kernels(t, a.steps)):
        if len(ks) != len(run):
            raise SystemExit(f"fused_time.py: {len(ks)} kernel events in a step, {len(run)} program nodes")
        for n, k in zip(run, ks):
            if k["name"] != n[1]:
                raise SystemExit(f"fused_time.py: event {k['name']} against node %{n[0]} {n[1]}")
            per[n[0]].append(k["dur"] / 1e3)
    ms = {i: (min(v) if a.min else sum(v) / len(v)) for i, v in per.items()}
    rows, kinds = [], defaultdict(lambda: [0, 0.0, 0])
    for nid, op, dt, n, args, rest, body in run:
        of = re.search(r'of=\[([\d,]*)\]', rest)
        stream = prod(int(s) for s in of.group(1).split(',')) if of else n
        refs = re.findall(r'%(\d+)', args)
        if op == 'reduce' and refs:
            stream = info[int(refs[0])][1]
        byts = sum(info[int(r)][1] * SZ[info[int(r)][0]] for r in refs if info[int(r)][1] == stream)
        byts += n * SZ[dt] if n == stream else 0
        kind = pattern(op, dt, n, stream, rest, body, refs, info) if a.patterns else \
            op if op != 'fused' else ('fused-reduce' if 'kind=' in rest else 'fused')
        k = kinds[kind]
        k[0] += 1
        k[1] += ms[nid]
        k[2] += byts
        tys = ",".join(info[int(r)][0] for r in refs)
        rows.append((ms[nid], nid, op, dt, n, tys, byts, body))
    tot = sum(k[1] for k in kinds.values())
    print(f"kernels per step: {tot:.1f} ms")
    for kind, (c, t, b) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        rate = b / t / 1e6 if t > 0 else 0
        print(f"  {kind:22s} {c:5d} nodes {t:8.1f} ms {b / 2**20:8.1f} MiB {rate:6.1f} GB/s")
    print(f"top {a.top} nodes" + ("" if a.all else " (no convolutions, no matmuls)") + ":")
    if not a.all:
        rows = [r for r in rows if not r[2].startswith('conv') and r[2] != 'dot_general']
    for t, nid, op, dt, n, tys, byts, body in sorted(rows, reverse=True)[:a.top]:
        rate = byts / t / 1e6 if t > 0 else 0
        print(f"  %{nid:<6d} {t:7.2f} ms {op:18s} {dt}[{n}] <- ({tys}) {byts / 2**20:7.1f} MiB {rate:6.1f} GB/s"
              f"  {len(body)} instr")


if __name__ == "__main__":
    main()
