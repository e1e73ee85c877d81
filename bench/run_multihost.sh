#!/usr/bin/env bash
# run_multihost.sh [BUILD_DIR (build/)] — data parallel over 2 hosts with slow
# links (issue 17). The hosts are network + UTS namespaces of this machine
# joined by a bridge (tests/netns.bash; needs root); both ends of each host's
# link are limited with `tc qdisc ... tbf` to each rate of $RATES. Per model
# (the MNIST CNN, batch 64; ResNet-20, batch 128; global batches):
#   1 process    1 process x 2 threads, no network (bench_train_step)
#   DDP          2 hosts x 1 process x 1 thread, --parallel ddp: batch norm over
#                each replica's rows (tessel train's DDP default; PyTorch DDP
#                without SyncBatchNorm; bench_train_step --local-bn)
#   DDP-SBN      the same with --sync-bn (batch norm over the global batch,
#                SyncBatchNorm); only for models with batch norm (ResNet-20:
#                for the CNN it is DDP's program)
#   SPMD         2 hosts, mesh data=2 (--parallel spmd)
#   FSDP         2 hosts, mesh fsdp=2 (--parallel fsdp)
# next to the modeled full-overlap bound: a host computes half the batch on
# one thread (measured: 1 process x 1 thread, batch B/2, no network: batch
# norm over those B/2 rows, i.e. DDP's per-replica program without the
# gradient averaging; DDP-SBN and SPMD compute the same work, their batch
# norms' statistics taken over both hosts by tiny collectives) while
# its link carries what rank 0 sends a step (metrics NetBytesSent) at the
# rate raw TCP gets through the link (measured per rate before the runs:
# netns_tcp, 4.7 MB one way; about 0.956 of tbf's nominal rate at MTU 1500,
# the TCP/IP and Ethernet headers; the nominal rate if it fails); fully hidden, a step takes max(compute, communication). The
# table gives samples/s, the bound, their ratio (issue 17's targets at
# 1 Gbit/s: DDP and SPMD >= 0.85x, FSDP >= 0.75x) and the share of the
# communication hidden: (compute + comm - step) / comm, clipped to [0, 1].
# comp2 and ratio2: the same bound with the compute measured while both hosts
# compute (two such half-batch processes side by side, no network; the
# slower's median): here the hosts share one machine's cores, caches and
# memory bandwidth, so ratio2 - ratio is that sharing, not communication.
# Correctness: SPMD's, FSDP's and DDP-SBN's second-step loss equals 1
# process's within 1e-4 relative, else the script fails (exit 1, after the
# table); DDP's CNN draws its own dropout masks per replica and DDP's
# ResNet-20 normalizes with each replica's statistics: not compared.
#
# Environment: RATES ("10gbit 1gbit 100mbit", tc's units), MODELS ("cnn
# resnet20"), PARS ("ddp ddp-sbn spmd fsdp"), STEPS and WARMUP (bench_train_step's; defaults 30 and 10),
# TIMEOUT seconds per run (600), NETNS_MTU (tests/netns.bash: the links' MTU, 1500 unset). PROFILE=1 adds, per model, rate and
# configuration, a `tessel train --profile` run (the CNN on Fashion-MNIST,
# ResNet-20 on synthetic 3x32x32 images at batch 128; STEPS steps) and
# prints rank 0's device line: compute, communication exposed and hidden
# behind compute (from the trace: the collectives' time under kernels), a
# measure that does not depend on the modeled compute; per large
# collective its median time against the link time of the bytes it sends; and
# the median step's timeline (link_gaps: each collective's start and end, and
# where device 0 runs no kernel); and the steady state's link cycle
# (link_cycle: from one start of the largest gradient reduction to the next,
# how long the link is busy and where it idles); TRACE_DIR=DIR keeps each
# profile run's trace there as MODEL-RATE-CONFIG.json. Run it on a quiet
# machine: each host gets one core, so 2 free cores at least.
#
# A/B mode: AB_BUILD=DIR (a second build, e.g. of main) runs, per model, rate
# and configuration, this build (B) and DIR's (A) alternately AB_REPS times
# (3; A B A B ...) and prints each run's median step and per side the median
# of those, with B/A, instead of the table (on a shared machine only such
# interleaved pairs compare two builds). The second-step losses of A and B
# must be equal (bit for bit), else exit 1. AB_ENV_A="VAR=VALUE ..." gives
# side A's ranks those variables (mpirun -x), e.g. AB_BUILD=build
# AB_ENV_A=TESSEL_COMM_LANES=0: one build with and without a mode; AB_ENV_B likewise for
# side B (the same mode on either side: whether B, always run second, gains by its place). AB_ARGS_B="ARGS"
# adds bench_train_step arguments to side B's runs (e.g. --bucket-kib 256).
# A side A whose bench_train_step has no --local-bn (before it) always ran
# DDP with sync-bn: there DDP-SBN is its DDP, and DDP (local statistics) is
# compared only for models without batch norm (the same program).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
bin="$build/bench_train_step"
[ -x "$bin" ] || { echo "run_multihost.sh: no $bin (build first: scripts/build.sh build)" >&2; exit 2; }
rates=(${RATES:-10gbit 1gbit 100mbit})
models=(${MODELS:-cnn resnet20})
pars=(${PARS:-ddp ddp-sbn spmd fsdp})
steps=(--steps "${STEPS:-30}" --warmup "${WARMUP:-10}")
tlimit="${TIMEOUT:-600}"
load="$(cut -d' ' -f1 /proc/loadavg)"
if /usr/bin/python3 -c "import sys; sys.exit(float('$load') < 0.5)"; then
  echo "run_multihost.sh: warning: load average $load — other processes share the cores; timings will be noisy" >&2
fi

. "$here/../tests/netns.bash"
netns_start 2 run_multihost.sh # sets tmp and the traps
echo "hosts ${hosts[*]} on $net" >&2

: >"$tmp/results"
failed=0
# par_args PAR MODEL [BIN]: bench_train_step's arguments for configuration PAR, or nothing (status 1)
# where it does not apply: DDP-SBN for a model without batch norm; DDP's local statistics for a BIN
# without --local-bn (an older build: its DDP is DDP-SBN) unless the model has no batch norm.
par_args() {
  local bn=1 old=0
  case $2 in cnn | mlp) bn=0 ;; esac
  [ -n "${3:-}" ] && ! grep -q -- --local-bn "$3" && old=1
  case $1 in
    ddp) [ $old = 1 ] && [ $bn = 1 ] && return 1
         [ $old = 1 ] && echo "--parallel ddp" || echo "--parallel ddp --local-bn" ;;
    ddp-sbn) [ $bn = 1 ] && echo "--parallel ddp" || return 1 ;;
    *) echo "--parallel $1" ;;
  esac
}
run() { # run LABEL RATE CMD...: one benchmark; its RESULT line, labeled, into $tmp/results
  local label="$1" rate="$2"
  shift 2
  echo "$label ${rate}: $*" >&2
  if timeout -k 10 "$tlimit" "$@" >"$tmp/out" 2>"$tmp/err"; then
    grep '^RESULT ' "$tmp/out" | sed "s/^RESULT [^ ]* /$label $rate /" >>"$tmp/results"
  else
    echo "  failed: $(tail -3 "$tmp/err")" >&2
    failed=1
  fi
}

run_pair() { # run_pair MODEL HALF_BATCH: two half-batch processes at once; the slower's RESULT as "pair"
  local i ok=1 pids=()
  echo "pair -: 2 x $bin --model $1 --batch $2" >&2
  for i in 0 1; do
    timeout -k 10 "$tlimit" env TESSEL_NUM_THREADS=1 "$bin" --model "$1" --threads 1 --batch "$2" "${steps[@]}" \
      >"$tmp/pair$i" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do wait "${pids[$i]}" || ok=0; done
  [ "$ok" = 1 ] || { echo "  failed: $(tail -2 "$tmp/pair0" "$tmp/pair1")" >&2; failed=1; return; }
  grep -h '^RESULT ' "$tmp/pair0" "$tmp/pair1" | /usr/bin/python3 -c "
import sys
rows = [l.split() for l in sys.stdin]
ms = lambda r: float(dict(x.split('=', 1) for x in r[3:] if '=' in x).get('median_ms', 'nan'))
r = max(rows, key=ms)
print('pair -', ' '.join(r[2:]))" >>"$tmp/results"
}

# ab_compare: the A/B mode (see the top); exits.
ab_compare() {
  local a="$AB_BUILD/bench_train_step" b m r par i side out
  [ -x "$a" ] || { echo "run_multihost.sh: AB_BUILD=$AB_BUILD: no $a" >&2; exit 2; }
  : >"$tmp/ab"
  for m in "${models[@]}"; do
    for r in "${rates[@]}"; do
      netns_rate "$r" || { echo "run_multihost.sh: tc tbf at $r failed" >&2; exit 1; }
      for par in "${pars[@]}"; do
        pb=$(par_args "$par" "$m") || continue
        pa=$(par_args "$par" "$m" "$a") || { echo "A/B $m $par: side A has no --local-bn (its DDP is DDP-SBN)" >&2; continue; }
        for i in $(seq "${AB_REPS:-3}"); do
          for side in A B; do
            [ $side = A ] && b="$a" ppa=($pa) || b="$bin" ppa=($pb)
            xa=() xb=() # AB_ENV_A / AB_ENV_B: that side's ranks get these variables; AB_ARGS_B: side B's arguments
            [ $side = A ] && for v in ${AB_ENV_A:-}; do xa+=(-x "$v"); done
            [ $side = B ] && for v in ${AB_ENV_B:-}; do xa+=(-x "$v"); done
            [ $side = B ] && xb=(${AB_ARGS_B:-})
            out=$(timeout -k 10 "$tlimit" env TESSEL_NUM_THREADS=1 "${mpi[@]}" --hostfile "$tmp/hostfile2" -n 2 \
              -x TESSEL_NUM_THREADS "${xa[@]}" "$b" --model "$m" --threads 1 "${ppa[@]}" "${steps[@]}" "${xb[@]}" 2>"$tmp/err" |
              grep '^RESULT ') || { echo "  $side failed: $(tail -3 "$tmp/err")" >&2; failed=1; }
            netns_kill
            [ -n "$out" ] && echo "$m $r $par $side $i ${out#RESULT }" | tee -a "$tmp/ab" >&2
          done
        done
      done
    done
  done
  /usr/bin/python3 - "$tmp/ab" <<'PY' || failed=1
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m, r, par, side, i, *kv = line.split()
    d = dict(x.split("=", 1) for x in kv if "=" in x)
    runs.setdefault((m, r, par), {}).setdefault(side, []).append(d)
bad = 0
print(f"{'model':9} {'link':8} {'config':6} {'A ms':>8} {'B ms':>8} {'B/A':>6}  runs (A B A B ...)")
for (m, r, par), sides in runs.items():
    a, b = sides.get("A", []), sides.get("B", [])
    ma = statistics.median(float(d["median_ms"]) for d in a) if a else float("nan")
    mb = statistics.median(float(d["median_ms"]) for d in b) if b else float("nan")
    seq = " ".join(f"{float(d['median_ms']):.1f}" for pair in zip(a, b) for d in pair)
    print(f"{m:9} {r:8} {par.upper():6} {ma:8.1f} {mb:8.1f} {mb / ma:6.2f}  {seq}")
    # under load: the steps' p25 and the process's CPU time per step (every thread), medians per side
    med = lambda ds, k: statistics.median(float(d[k]) for d in ds) if ds and all(k in d for d in ds) else float("nan")
    print(f"{'':26} p25 A/B {med(a, 'p25_ms'):.1f} / {med(b, 'p25_ms'):.1f} ms, "
          f"cpu A/B {med(a, 'cpu_ms'):.1f} / {med(b, 'cpu_ms'):.1f} ms/step")
    losses = {d.get("check_loss") for d in a + b}
    if len(losses) > 1:
        print(f"  FAIL {par} {m} at {r}: second-step losses differ between A and B: {sorted(losses)}")
        bad = 1
sys.exit(bad)
PY
  exit "$failed"
}
[ -n "${AB_BUILD:-}" ] && ab_compare

for m in "${models[@]}"; do
  run one - env TESSEL_NUM_THREADS=2 "$bin" --model "$m" --threads 2 "${steps[@]}"
  b=$(grep "^one - $m " "$tmp/results" | sed 's/.*batch=\([0-9]*\).*/\1/')
  [ -n "$b" ] || continue
  run half - env TESSEL_NUM_THREADS=1 "$bin" --model "$m" --threads 1 --batch $((b / 2)) "${steps[@]}"
  run_pair "$m" $((b / 2))
  for r in "${rates[@]}"; do
    netns_rate "$r" || { echo "run_multihost.sh: tc tbf at $r failed" >&2; failed=1; continue; }
    grep -q "^link $r " "$tmp/results" || netns_tcp 4718592 5 oneway | sed "s/^RESULT [^ ]* /link $r - /" >>"$tmp/results"
    for par in "${pars[@]}"; do
      pb=$(par_args "$par" "$m") || continue
      run "$par" "$r" env TESSEL_NUM_THREADS=1 "${mpi[@]}" --hostfile "$tmp/hostfile2" -n 2 -x TESSEL_NUM_THREADS \
        "$bin" --model "$m" --threads 1 $pb "${steps[@]}"
      netns_kill # nothing left over between runs
    done
  done
done

# link_use TRACE RATE: per kind of collective of 1 MB or more (rank 0's trace), the median time
# against the time its bytes sent would take at the link rate (raw TCP's, as measured for the bound) (2 processes: a reduce-scatter sends
# half its operand, an all-gather its block, an all-reduce its operand): how well one collective
# fills the link while it runs (below 1: MPI's progress or the protocol leaves it idle)
link_use() {
  /usr/bin/python3 - "$1" "$2" <<'PY' || true
import json, re, statistics, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", sys.argv[2].lower())
rate = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8
share = {"ReduceScatter": 0.5, "AllGather": 1.0, "AllReduce": 1.0}
by = {}
for e in ev:
    b = (e.get("args") or {}).get("bytes", 0)
    if e.get("cat") == "collective" and b >= 1e6 and e["name"] in share:
        by.setdefault((e["name"], b), []).append(e["dur"] / 1e3)
for (name, b), d in sorted(by.items()):
    ideal = b * share[name] / rate * 1e3
    med = statistics.median(d)
    print(f"  {name} {b / 1e6:.2f} MB x{len(d)}: median {med:.1f} ms, link time of its bytes {ideal:.1f} ms "
          f"({ideal / med:.2f} of the link while it runs)")
PY
}

# link_gaps TRACE: rank 0's median training step (an execute of median length) as a timeline
# from the execute's start: each collective started in it (kind, MB, start-end ms; a carried one may
# end after the step) and the gaps of 1 ms or more in which device 0 runs no kernel (waiting on a
# collective, or between executes): what the step does not hide, and where
link_gaps() {
  /usr/bin/python3 - "$1" <<'PY' || true
import json, statistics, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
ex = sorted((e for e in ev if e.get("cat") == "execute"), key=lambda e: e["ts"])
if len(ex) < 3:
    sys.exit(0)
med = statistics.median(e["dur"] for e in ex)
train = [e for e in ex if 0.5 * med <= e["dur"] <= 2 * med]
step = sorted(train, key=lambda e: e["dur"])[len(train) // 2]
s0, s1 = step["ts"], step["ts"] + step["dur"]
nxt = next((e["ts"] for e in ex if e["ts"] > s0), s1)
ms = lambda t: (t - s0) / 1e3
kern = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
              if e.get("cat") == "kernel" and e.get("tid") == 0 and e["ts"] < s1 and e["ts"] + e["dur"] > s0)
colls = sorted((e for e in ev if e.get("cat") == "collective" and e.get("tid") == 0 and s0 <= e["ts"] < s1),
               key=lambda e: e["ts"])
print(f"  median step {step['dur'] / 1e3:.1f} ms (of {len(train)}; next execute at {ms(nxt):.1f}):", end="")
for e in colls:
    b = (e.get("args") or {}).get("bytes", 0)
    print(f" {e['name']} {b / 1e6:.2f}MB {ms(e['ts']):.1f}-{ms(e['ts'] + e['dur']):.1f}", end=";")
gaps, t = [], s0
for a, b in kern:
    if a - t >= 1e3:
        gaps.append((t, a))
    t = max(t, b)
if s1 - t >= 1e3:
    gaps.append((t, s1))
print("\n  no kernel on device 0:", " ".join(f"{ms(a):.1f}-{ms(b):.1f}" for a, b in gaps) or "no gap of 1 ms",
      f"(last kernel ends at {ms(t):.1f})")
PY
}

# link_cycle TRACE: the steady state of a data-parallel step over a slow link, from rank 0's
# trace: cycles from one start of the largest gradient reduction (the CNN's fc1 reduce-scatter or
# all-reduce) to the next, medians over the training steps: the cycle, the time some collective
# runs (busy), the link idle time (no collective), the part of it between the reduction's end and
# the next collective's start (the backward pass still running after the reduction ended: the
# update and all-gather wait for it, because the worker runs collectives in start order and the
# buckets' reduction starts at the end of the backward pass), the part between the last collective's
# end and the next reduction's start (the next step's compute up to that gradient, after its last
# wait), and the time device 0 runs no kernel (waiting for a collective). Full overlap would be a
# cycle of busy time only.
link_cycle() {
  /usr/bin/python3 - "$1" <<'PY' || true
import json, statistics, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 0]
coll = sorted(((e["ts"], e["ts"] + e["dur"], e["name"], (e.get("args") or {}).get("bytes", 0))
               for e in ev if e.get("cat") == "collective"), key=lambda c: c[0])
red = [c for c in coll if c[2] in ("ReduceScatter", "AllReduce")]
if not red:
    sys.exit(0)
big = max(c[3] for c in red)
starts = [c for c in red if c[3] == big][3:]  # the first steps compile and warm up
kern = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel")
def busy(iv, a, b):  # time in [a, b) covered by the intervals iv
    t, s = a, 0.0
    for x, y in iv:
        x, y = max(x, t), min(y, b)
        if y > x:
            s, t = s + y - x, y
    return s
rows = []
for r, nxt in zip(starts, starts[1:]):
    a, b = r[0], nxt[0]
    after = [c[0] for c in coll if r[1] <= c[0] < b]
    ended = [c[1] for c in coll if a <= c[0] and c[1] <= b]
    rows.append((b - a, busy([c[:2] for c in coll], a, b), (min(after) if after else b) - r[1],
                 b - max(ended), b - a - busy(kern, a, b)))
if len(rows) < 3:
    sys.exit(0)
med = [statistics.median(x[k] for x in rows) / 1e3 for k in range(5)]
print(f"  link cycle ({big / 1e6:.2f} MB reduction to the next, median of {len(rows)}): {med[0]:.1f} ms, "
      f"collectives busy {med[1]:.1f}, link idle {med[0] - med[1]:.1f}: {med[2]:.1f} after the reduction's "
      f"end (backward left), {med[3]:.1f} before the next reduction (its gradient's compute after the "
      f"last collective); device 0 without a kernel {med[4]:.1f}")
PY
}

if [ "${PROFILE:-0}" = 1 ]; then
  tessel="$build/tessel"
  for m in "${models[@]}"; do
    case $m in # the benchmark's batch; ResNet-20 on synthetic CIFAR-shaped images (no data files needed)
      cnn) da=(--eval-batch 5000) ;;
      resnet20) da=(--dataset synthetic --batch 128 --eval-batch 5000) ;;
      *) echo "profile $m: no profile settings for this model" >&2; continue ;;
    esac
    for r in "${rates[@]}"; do
      netns_rate "$r" || { failed=1; continue; }
      for par in "${pars[@]}"; do
        par_args "$par" "$m" >/dev/null || continue # the configurations the table has
        case $par in
          ddp) pa=(--parallel ddp) ;; ddp-sbn) pa=(--parallel ddp --sync-bn) ;;
          spmd) pa=(--mesh data=2) ;; fsdp) pa=(--mesh fsdp=2) ;;
        esac
        if timeout -k 10 "$tlimit" env TESSEL_NUM_THREADS=1 "${mpi[@]}" --hostfile "$tmp/hostfile2" -n 2 \
          -x TESSEL_NUM_THREADS "$tessel" train --model "$m" --threads 1 --steps "${STEPS:-30}" "${da[@]}" \
          "${pa[@]}" --profile --trace "$tmp/trace.json" >"$tmp/prof" 2>&1; then
          echo "profile $m $r ${par^^}: $(grep -E 'device 0:' "$tmp/prof" | sed 's/^ *//')"
          lr=$(sed -n "s/^link $r .*mbps=\([0-9]*\).*/\1mbit/p" "$tmp/results") # measured, else nominal
          link_use "$tmp/trace.json" "${lr:-$r}"
          link_gaps "$tmp/trace.json"
          link_cycle "$tmp/trace.json"
          [ -n "${TRACE_DIR:-}" ] && mkdir -p "$TRACE_DIR" && cp "$tmp/trace.json" "$TRACE_DIR/$m-$r-$par.json"
        else
          echo "profile $m $r ${par^^}: failed: $(tail -2 "$tmp/prof")"
          failed=1
        fi
        netns_kill
      done
    done
  done
fi

/usr/bin/python3 - "$tmp/results" <<'PY' || failed=1
import re, sys
rows = []
for line in open(sys.argv[1]):
    label, rate, model, *kv = line.split()
    d = dict(x.split("=", 1) for x in kv if "=" in x)
    rows.append((label, rate, model, d))
def nominal_bps(r):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", r.lower())
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8
measured = {rate: float(d["mbps"]) * 1e6 / 8 for l, rate, _, d in rows if l == "link" and "mbps" in d}
def rate_bps(r):  # what TCP carries over the link (measured), else the nominal rate
    return measured.get(r, nominal_bps(r))
for r, bps in measured.items():
    print(f"link {r}: raw TCP carries {bps * 8 / 1e6:.0f} Mbit/s of payload ({bps / nominal_bps(r):.3f} of nominal;"
          f" headers), the rate of the bound's comm")
bad = 0
print(f"{'model':9} {'link':8} {'config':9} {'samples/s':>10} {'bound':>8} {'ratio':>6} {'hidden':>7} "
      f"{'step ms':>8} {'comp ms':>8} {'comm ms':>8} {'MB/step':>8} {'comp2 ms':>9} {'ratio2':>7}")
for model in dict.fromkeys(r[2] for r in rows if r[0] != "link"):
    one = next((d for l, _, m, d in rows if l == "one" and m == model), None)
    half = next((d for l, _, m, d in rows if l == "half" and m == model), None)
    pair = next((d for l, _, m, d in rows if l == "pair" and m == model), None)
    if one:
        print(f"{model:9} {'-':8} {'1 process':9} {float(one['samples_per_s']):10.0f}")
    for label, rate, m, d in rows:
        if m != model or label in ("one", "half", "pair", "link"):
            continue
        B, step = int(d["batch"]), float(d["median_ms"])
        comp = float(half["median_ms"]) if half else float("nan")
        comm = float(d["net_bytes"]) / rate_bps(rate) * 1e3
        bound = B / max(comp, comm) * 1e3
        hidden = min(1.0, max(0.0, (comp + comm - step) / comm)) if comm > 0 else 1.0
        comp2 = float(pair["median_ms"]) if pair else float("nan")
        bound2 = B / max(comp2, comm) * 1e3
        print(f"{model:9} {rate:8} {label.upper():9} {float(d['samples_per_s']):10.0f} {bound:8.0f} "
              f"{float(d['samples_per_s']) / bound:6.2f} {hidden:7.0%} {step:8.1f} {comp:8.1f} {comm:8.1f} "
              f"{float(d['net_bytes']) / 1e6:8.2f} {comp2:9.1f} {float(d['samples_per_s']) / bound2:7.2f}")
        if label in ("spmd", "fsdp", "ddp-sbn") and one:
            a, b = float(one["check_loss"]), float(d["check_loss"])
            if abs(a - b) / max(1.0, abs(a)) > 1e-4:
                print(f"  FAIL {label} {model} at {rate}: second-step loss {b} vs 1 process {a}")
                bad = 1
sys.exit(bad)
PY
exit "$failed"
