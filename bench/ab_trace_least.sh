#!/usr/bin/env bash
# ab_trace_least.sh BUILD_A BUILD_B [bench_convnet_step flags (default --model resnet20 --amp bf16 --steps 8 --warmup 2)]
# Kernel-by-kernel A/B of one training step on 1 thread, in least times:
# BUILD_A and BUILD_B's bench_convnet_step with TESSEL_TRACE, A B A B ... for
# $ROUNDS rounds (default 2), under nice; each kernel of the step (by position)
# at its least time over all rounds' timed steps (bench/trace_ops.py --least),
# summed per kernel name, A next to B, and the $TOP (8) positions where B
# differs most.
# Least times stay near the unloaded ones on a loaded host, where the step's
# wall and CPU medians move by 5-10% between runs of the same build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/prologue.bash" # ab_step_args
ab_step_args "$@"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "${ROUNDS:-2}"); do
  for side in A B; do
    dir="$a"
    [ "$side" = B ] && dir="$b"
    TESSEL_NUM_THREADS=1 OMP_WAIT_POLICY=passive TESSEL_TRACE="$tmp/$side.$r.json" nice "$dir/bench_convnet_step" \
      --threads 1 "${flags[@]}" 2>/dev/null | grep -o 'final_loss=[^ ]*\|cpu_median_ms=[^ ]*' | tr '\n' ' '
    echo "($side round $r, load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
/usr/bin/python3 - "$tmp" "${ROUNDS:-2}" "$steps" <<'PY'
import json, os, sys
from collections import defaultdict
tmp, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def seqs(path):
    ev = json.load(open(path))["traceEvents"]
    ex = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "execute"), key=lambda e: e["ts"])[-steps:]
    ks = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"])
    return [[(e["name"], e["dur"] / 1e3) for e in ks if s["ts"] <= e["ts"] < s["ts"] + s["dur"]] for s in ex]
least = {}
for side in "AB":
    runs = [st for r in range(1, rounds + 1) for st in seqs(f"{tmp}/{side}.{r}.json")]
    assert all([n for n, _ in st] == [n for n, _ in runs[0]] for st in runs), "kernel sequences differ between steps"
    least[side] = [(runs[0][i][0], min(st[i][1] for st in runs)) for i in range(len(runs[0]))]
print(f"{'kernel (least ms per step)':28s} {'A':>9s} {'B':>9s} {'B-A':>8s}")
names = defaultdict(lambda: [0.0, 0.0])
for k, side in enumerate("AB"):
    for n, ms in least[side]:
        names[n][k] += ms
for n, (x, y) in sorted(names.items(), key=lambda kv: -kv[1][0]):
    print(f"  {n:26s} {x:9.2f} {y:9.2f} {y - x:+8.2f}")
x, y = sum(v[0] for v in names.values()), sum(v[1] for v in names.values())
print(f"  {'all kernels':26s} {x:9.2f} {y:9.2f} {y - x:+8.2f}")
if [n for n, _ in least["A"]] == [n for n, _ in least["B"]]:
    d = sorted(range(len(least["A"])), key=lambda i: -abs(least["B"][i][1] - least["A"][i][1]))[:int(os.environ.get("TOP", "8"))]
    for i in d:
        print(f"  position {i:4d} {least['A'][i][0]:16s} A {least['A'][i][1]:8.3f} B {least['B'][i][1]:8.3f}")
PY
