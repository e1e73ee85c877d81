#!/usr/bin/env bash
# run_mh_trace.sh [BUILD_DIR (build/)] — where a 2-host data-parallel step
# spends its time (issue 17): bench_train_step over 2 namespace hosts
# (tests/netns.bash; root) at link rate $RATE (1gbit), each rank traced
# (TESSEL_TRACE), then per rank and per kind of collective (name, bytes):
# calls per step, their summed and least times on the device thread, the
# kernel time per step and the step's median; how many collectives a step
# starts on the worker (the others the device calls in line, each a wait
# for the peer). Rank 0's RESULT line too.
# With PAIR=1, first two half-batch processes side by side without network
# (run_multihost.sh's comp2), traced the same way: the step without the
# collectives, to compare kernel by kernel (bench/trace_ops.py --names).
#
# Environment: MODEL (resnet20), PAR (ddp: batch norm over each replica's
# rows, bench_train_step --local-bn; ddp-sbn: --sync-bn, over both; spmd;
# fsdp; as bench/run_multihost.sh's configurations), RATE (1gbit), STEPS (30), WARMUP
# (10), OUT (a directory for the traces; a temporary one if unset),
# EXTRA (more bench_train_step arguments), XENV (VAR=VALUE ... for every rank,
# e.g. XENV=TESSEL_UPDATE_CHAINS=1). ANALYZE=DIR: no run, only the
# analysis of the traces already in DIR (rank*.json, pair*.json; STEPS of
# them per file). A step is an execute that runs kernels: bench_train_step's
# ar_ms probe after the timed steps (15 executes of one all-reduce of the
# gradient's bytes; for the CNN at 1 Gbit/s as long as a step) is left out
# (tests/multihost_trace.sh).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
bin="$build/bench_train_step"
if [ -n "${ANALYZE:-}" ]; then
  out="$ANALYZE"
else
[ -x "$bin" ] || { echo "run_mh_trace.sh: no $bin" >&2; exit 2; }
model="${MODEL:-resnet20}" par="${PAR:-ddp}" rate="${RATE:-1gbit}"
case $par in ddp) pargs="ddp --local-bn" ;; ddp-sbn) pargs=ddp ;; *) pargs=$par ;; esac
steps=(--steps "${STEPS:-30}" --warmup "${WARMUP:-10}")
. "$here/../tests/netns.bash"
netns_start 2 run_mh_trace.sh
out="${OUT:-$tmp}"
mkdir -p "$out"
echo "load $(cut -d' ' -f1-3 /proc/loadavg); traces in $out" >&2

if [ "${PAIR:-0}" = 1 ]; then
  b=$( [ "$model" = cnn ] && echo 32 || echo 64 )
  for i in 0 1; do
    env TESSEL_NUM_THREADS=1 TESSEL_TRACE="$out/pair$i.json" "$bin" --model "$model" --threads 1 --batch "$b" \
      "${steps[@]}" >"$tmp/pair$i" 2>&1 &
  done
  wait
  grep -h '^RESULT' "$tmp/pair0" "$tmp/pair1" | sed 's/^/pair: /'
fi

netns_rate "$rate" || { echo "run_mh_trace.sh: tc at $rate failed" >&2; exit 1; }
timeout -k 10 600 env TESSEL_NUM_THREADS=1 "${mpi[@]}" --hostfile "$tmp/hostfile2" -n 2 -x TESSEL_NUM_THREADS ${XENV:+$(printf -- "-x %s " $XENV)} \
  sh -c "TESSEL_TRACE=$out/rank\$OMPI_COMM_WORLD_RANK.json exec $bin --model $model --threads 1 --parallel $pargs \
  ${steps[*]} ${EXTRA:-}" >"$tmp/out" 2>&1 || { tail -5 "$tmp/out"; exit 1; }
netns_kill
grep '^RESULT' "$tmp/out"
fi

/usr/bin/python3 - "$out" "${STEPS:-30}" <<'PY'
import bisect, glob, json, os, statistics, sys
d, steps = sys.argv[1], int(sys.argv[2])
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    ev = [e for e in json.load(open(f))["traceEvents"] if e.get("ph") == "X"]
    ex = sorted((e for e in ev if e.get("cat") == "execute"), key=lambda e: e["ts"])
    if not ex:
        continue
    # a training step runs kernels; bench_train_step's ar_ms probe after the timed steps (15 executes of
    # one all-reduce of the gradient's bytes, ~40 ms at 1 Gbit/s for the CNN, as long as a step) runs none
    comp = sorted((e["ts"], e["dur"]) for e in ev if e.get("cat") == "kernel" and e.get("pid") == 0
                  and not any(c in e["name"] for c in ("all_reduce", "all_gather", "reduce_scatter")))
    def computes(x):
        i = bisect.bisect_left(comp, (x["ts"], -1.0))
        return i < len(comp) and comp[i][0] < x["ts"] + x["dur"]
    ex = [e for e in ex if computes(e)]
    if not ex:
        continue
    top = statistics.median(sorted(e["dur"] for e in ex)[len(ex) // 2:])  # the training steps are the long ones
    ex = [e for e in ex if e["dur"] >= 0.4 * top][-steps:]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in ex]
    inside = lambda e: any(a <= e["ts"] < b for a, b in spans)
    dev = [e for e in ev if e.get("pid") == 0 and inside(e)]
    kern = sum(e["dur"] for e in dev if e.get("cat") == "kernel") / 1e3 / len(ex)
    started = sum(1 for e in dev if e.get("cat") == "kernel" and e["name"].endswith("(start)")) / len(ex)
    by = {}
    for e in dev:
        if e.get("cat") == "collective":
            by.setdefault((e["name"], (e.get("args") or {}).get("bytes", 0)), []).append(e["dur"] / 1e3)
    print(f"{os.path.basename(f)}: step median {statistics.median(e['dur'] for e in ex) / 1e3:.1f} ms, "
          f"kernels {kern:.1f} ms/step, collectives {sum(map(len, by.values())) / len(ex):.0f}/step "
          f"{sum(map(sum, by.values())) / len(ex):.1f} ms/step, started on the worker {started:.1f}/step "
          f"(the rest called in line: a wait on the device thread)")
    for (name, b), t in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {name:14} {b:>9} B  {len(t) / len(ex):5.1f}/step  sum {sum(t) / len(ex):6.2f} ms/step  "
              f"least {min(t):.3f}  median {statistics.median(t):.3f} ms")
PY
