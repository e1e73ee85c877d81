#!/usr/bin/env bash
# count_reorders.sh BUILD [bench_convnet_step flags (default --model resnet20 --amp none)]
# Layout moves around the convolutions in ONE training step, counted from
# oneDNN's execution log (ONEDNN_VERBOSE=1): BUILD/bench_convnet_step runs
# --warmup 1 --steps 1 on 1 thread (two identical steps; every count is
# halved and must come out whole). Prints per step:
#   convs by implementation (plain NCHW gemm vs blocked jit kernels);
#   oneDNN reorders by what they move — activations (dim 0 = the batch) or
#   weights — and direction (into the blocked layout or out of it), with the
#   formats;
#   blocked activation operands of the convolutions (an activation argument
#   in a blocked layout: each needs a move in or out, or reads a copy an
#   earlier conv of the step made — conv.c's shared reorders).
# bf16 activations with channels a multiple of 16 move by kernels/blk16.c,
# which oneDNN does not log: for bf16 the activation moves are the blocked
# operands less the shared ones (the f32 run's blocked operands less its
# activation reorders; the same graph has the same sharing).
#   e.g. bash bench/count_reorders.sh build --model resnet50 --amp bf16
set -euo pipefail
build="$1"
shift
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(--model resnet20 --amp none)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
ONEDNN_VERBOSE=1 TESSEL_NUM_THREADS=1 "$build/bench_convnet_step" --threads 1 --warmup 1 --steps 1 "${flags[@]}" \
  >"$log" 2>/dev/null
grep '^RESULT' "$log" | grep -o 'model=[^ ]*\|^RESULT tessel [^ ]*\|amp=[^ ]*\|final_loss=[^ ]*' | tr '\n' ' '
echo
/usr/bin/python3 - "$log" <<'PY'
import collections, re, sys
rows = [l.rstrip("\n").split(",") for l in open(sys.argv[1]) if l.startswith("onednn_verbose,exec,cpu,")]
batch = None
for l in open(sys.argv[1]):
    m = re.search(r" batch=(\d+)", l)
    if l.startswith("RESULT") and m:
        batch = m.group(1)
convs, reorders, blocked_ops = collections.Counter(), collections.Counter(), 0
for r in rows:
    prim, impl, mds, dims = r[3], r[4], r[6], r[-2]
    if prim == "convolution":
        convs[impl] += 1
        # activation args: src / dst / diff_src / diff_dst in a blocked layout (aBcd..)
        blocked_ops += sum(1 for md in mds.split() if re.match(r"(src|dst|diff_src|diff_dst)_", md)
                           and re.search(r":aBcd\d+b", md))
    elif prim == "reorder":
        src, dst = mds.split()[:2]
        what = "activation" if dims.split("x")[0] == batch else "weight"
        into = "into blocked" if ":abcd:" in src else "out of blocked"
        fmt = lambda md: md.split(":")[0].split("_")[1] + ":" + md.split(":")[3]
        reorders[(what, into, f"{fmt(src)} -> {fmt(dst)}")] += 1
def per_step(n):
    if n % 2:
        sys.exit(f"count_reorders.sh: {n} is odd: the two steps differ")
    return n // 2
print(f"convolutions per step: {per_step(sum(convs.values()))}  " +
      "  ".join(f"{k} {per_step(v)}" for k, v in sorted(convs.items())))
tot = collections.Counter()
for (what, into, fmt), n in sorted(reorders.items()):
    tot[what] += n
    print(f"  reorder {what:10s} {into:14s} {fmt:40s} {per_step(n)}")
print(f"oneDNN reorders per step: activations {per_step(tot['activation'])}, weights {per_step(tot['weight'])}")
print(f"blocked activation operands of the convolutions per step: {per_step(blocked_ops)}")
PY
