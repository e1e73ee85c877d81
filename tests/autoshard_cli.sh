#!/usr/bin/env bash
# autoshard_cli.sh BUILD_DIR — auto-sharding from the CLI: its training runs and the calibration
# (both keep 2 cores busy):
#  - `tessel train --auto-shard` on a 2-D mesh (any axis names) follows the
#    1-device loss curve within 1e-4 (20 MLP steps), in one process and as
#    2 processes x 2 devices under mpirun (whose every process solves the
#    same plan: the compile checks the programs are equal); the GPT (10
#    steps) on 2x2 and 4 devices;
#  - the calibration cache: written, read, ignored for another machine's key,
#    and `tessel train --auto-shard` solves with it (and says so).
# Its planning checks (inspect --json and --auto-shard, the quality against hand
# layouts, `tessel plan`: compiles and one-thread solves) are tests/autoshard_plan.sh,
# split off for `ctest -j2`: they run beside the tests that keep both cores busy.
set -u
build="${1:?usage: autoshard_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, compare, expect
small_test_set # $fm: the training set, 1000 test images (the losses are checked, not the accuracy)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TESSEL_CALIBRATION=none # deterministic: the cost model's defaults, never this machine's cache
steps=(--model mlp --steps 20 --epochs 1 --batch 32 --eval-batch 2000 --data-dir "$fm")
run() { # run NAME [mpirun NP] ARGS...
  local name="$1" rc=0
  shift
  if [ "${1:-}" = mpirun ]; then
    local np="$2"
    shift 2
    TESSEL_NUM_THREADS=1 timeout -k 5 180 mpirun -n "$np" --oversubscribe --bind-to none \
      "$tessel" train "${steps[@]}" --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  else
    TESSEL_NUM_THREADS=2 timeout -k 5 180 "$tessel" train "${steps[@]}" --log-json "$tmp/$name.json" "$@" \
      >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then ok "$name: train $* exits 0"; else bad "$name: exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}
run one
run auto22 --mesh a=2,b=2 --auto-shard
compare one auto22 20
if command -v mpirun >/dev/null; then
  run mpauto mpirun 2 --mesh a=2,b=2 --auto-shard
  compare one mpauto 20
else
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
fi

# the GPT (2 layers, synthetic tokens): auto-sharded on 2x2 and 4 devices follows 1 device
gpt=(--model gpt --layers 2 --d-model 32 --heads 4 --seq 16 --vocab 64 --dataset synthetic --batch 8 --steps 10
  --eval-every 1000 --eval-batches 1 --seed 5)
steps=("${gpt[@]}")
run gpt1
run gpt22 --mesh a=2,b=2 --auto-shard
run gpt4 --mesh a=4 --auto-shard
compare gpt1 gpt22 10
compare gpt1 gpt4 10

# the calibration: written by an explicit --calibrate FILE, read back as a
# device file and as the cache when its key (CPU model, threads) is this machine's
# (timeout 180 s: a hang guard only; on a loaded machine the measurement took 75 s)
if TESSEL_NUM_THREADS=2 timeout -k 5 180 "$tessel" plan --calibrate "$tmp/cal/calibration.txt" >"$tmp/cal.out" 2>&1 &&
  grep -q "^kernel.conv_bwd_filter = " "$tmp/cal/calibration.txt" && grep -q "^kernel.attention = " "$tmp/cal/calibration.txt" && grep -q "^allreduce.8.latency_s = " "$tmp/cal/calibration.txt" &&
  grep -q "^allreduce.8.busy_s = " "$tmp/cal/calibration.txt" && grep -q "^shared_efficiency.8 = " "$tmp/cal/calibration.txt" &&
  grep -q "^allreduce.8.busy_long_s = " "$tmp/cal/calibration.txt" && grep -q "^allreduce.8.busy_long_after_s = " "$tmp/cal/calibration.txt" &&
  grep -q "^kernel.conv_bwd_filter.weight_bytes_per_s = " "$tmp/cal/calibration.txt" &&
  [ "$(grep -Ec "^kernel\.[a-z_]* = .*# .*; [3-9] rounds: spread [0-9]+%, range [0-9]+%(, unconfirmed)?$" "$tmp/cal/calibration.txt")" = 17 ] && grep -q "^kernel.conv_bwd_filter_nhwc = " "$tmp/cal/calibration.txt" &&
  grep -q "^kernel classes over 3+ rounds (1 thread): largest spread" "$tmp/cal.out" &&
  grep -Eq "^rounds: [0-9]+ estimates, [0-9]+ rounds, [0-9]+ confirmed within 10%, [0-9]+ unconfirmed; largest spread" "$tmp/cal.out" &&
  grep -Eq "^step_overhead\.2_s = .*# [3-9] rounds: spread [0-9]+%" "$tmp/cal/calibration.txt"; then
  ok "plan --calibrate writes every kernel class (3-9 rounds, their spread and range), the filter gradient's weight rate, the all-reduce alpha/beta, busy waits (after little and more compute) and shared efficiency, and the rounds' report"
else
  bad "plan --calibrate: $(tail -3 "$tmp/cal.out")"
fi
# allreduce.N.latency_s and busy_s come from the step of one 1-element all-reduce
# less the step's own fixed cost (step_overhead.N_s, which the prediction charges once
# per step): the file's measured numbers (comments) give its keys back
if /usr/bin/python3 - "$tmp/cal/calibration.txt" <<'PY'
import math, re, sys
t = open(sys.argv[1]).read()
key = lambda k: float(re.search(r"^%s = (\S+)" % re.escape(k), t, re.M).group(1))
for n in (2, 4, 8):
    m = re.search(r"^allreduce\.%d\.latency_s = \S+ .*all-reduce's step, (\S+) s median, less step_overhead" % n, t, re.M)
    b = re.search(r"^allreduce\.%d\.busy_s = \S+ .*256\^3\): (\S+) s, less back" % n, t, re.M)
    lat, step, busy = key("allreduce.%d.latency_s" % n), key("step_overhead.%d_s" % n), key("allreduce.%d.busy_s" % n)
    coll = max(float(m.group(1)) - step, 1e-9)  # 4 significant digits each: 1e-3 of the larger
    assert abs(lat * 2 * math.log2(n) - coll) <= 2e-3 * max(float(m.group(1)), step), (n, lat, coll)
    want = max(float(b.group(1)) - lat * 2 * math.log2(n), 1e-9)
    assert abs(busy - want) <= 2e-3 * max(float(b.group(1)), coll) + 1e-12, (n, busy, want)
PY
then ok "calibration: allreduce.N.latency_s and busy_s exclude the step's fixed cost (step_overhead.N_s)"
else bad "calibration: allreduce.N latency/busy do not follow from the measured step less step_overhead.N_s"; fi
# --calibrate writes a device file that --device reads (the numbers are this busy machine's: not checked;
# one calibration serves every check: each measures for seconds)
expect caldev 0 "" plan --model mlp --mesh data=4 --device "$tmp/cal/calibration.txt" --json
if TESSEL_NUM_THREADS=2 TESSEL_CALIBRATION="$tmp/cal/calibration.txt" "$tessel" plan --model mlp --mesh data=4 --json |
  grep -q '"costs":"calibration '; then ok "the calibration cache is used when its key matches"; else bad "cache not used"; fi
sed 's/^calibration.cpu = .*/calibration.cpu = another CPU/' "$tmp/cal/calibration.txt" >"$tmp/other.txt"
if TESSEL_NUM_THREADS=2 TESSEL_CALIBRATION="$tmp/other.txt" "$tessel" plan --model mlp --mesh data=4 --json |
  grep -q "is for 'another CPU'"; then ok "another machine's calibration is not used"; else bad "foreign calibration used"; fi
# train --auto-shard solves with the calibration cache when it is this machine's, and says so
short=(--model mlp --steps 2 --epochs 1 --batch 32 --eval-batch 2000 --data-dir "$fm" --mesh a=2 --auto-shard)
if TESSEL_NUM_THREADS=2 TESSEL_CALIBRATION="$tmp/cal/calibration.txt" timeout -k 5 60 "$tessel" train "${short[@]}" \
  >"$tmp/trcal.out" 2>&1 && grep -q "^auto-shard: the solver's costs: calibration $tmp/cal/calibration.txt" "$tmp/trcal.out"; then
  ok "train --auto-shard solves with the calibration cache"
else bad "train --auto-shard ignores the calibration: $(grep -m1 auto-shard "$tmp/trcal.out") $(tail -2 "$tmp/trcal.out")"; fi
if TESSEL_NUM_THREADS=2 timeout -k 5 60 "$tessel" train "${short[@]}" >"$tmp/trnone.out" 2>&1 &&
  grep -q "^auto-shard: the solver's costs: no calibration (TESSEL_CALIBRATION=none)" "$tmp/trnone.out"; then
  ok "train --auto-shard without a calibration says it uses the defaults"
else bad "train --auto-shard, TESSEL_CALIBRATION=none: $(tail -2 "$tmp/trnone.out")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
