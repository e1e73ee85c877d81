#!/usr/bin/env bash
# autoshard_cli.sh BUILD_DIR — auto-sharding from the CLI:
#  - `tessel train --auto-shard` on a 2-D mesh (any axis names) follows the
#    1-device loss curve within 1e-4 (20 MLP steps), in one process and as
#    2 processes x 2 devices under mpirun (whose every process solves the
#    same plan: the compile checks the programs are equal); the GPT (10
#    steps) on 2x2 and 4 devices;
#  - `tessel inspect --json` prints the prediction and the inputs'
#    shardings, with and without --auto-shard;
#  - `inspect --auto-shard` explains the plan; a tiny --time-limit gives
#    the greedy plan and says so; an impossible --memory-limit is an error
#    naming the smallest achievable peak;
#  - quality from the CLI for the GPT and ResNet-20 (batch 16): the plan's
#    predicted step <= the best hand layout's (data, model, data x model,
#    fsdp x model) + 5% on 4 devices, 1-D and 2x2;
#  - `tessel plan` predicts 512 devices (hand and --auto-shard) against
#    devices/h100-sxm.txt without running; a bad device file is an error;
#  - the calibration cache: written, read, ignored for another machine's key,
#    and `tessel train --auto-shard` solves with it (and says so).
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

json() { # json NAME ARGS...: inspect --json, checked for the contract's keys
  local name="$1"
  shift
  if TESSEL_NUM_THREADS=2 timeout -k 5 120 "$tessel" inspect --json "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &&
    /usr/bin/python3 - "$tmp/$name.out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["predicted"]
assert p["step_ms"] > 0 and p["comm_bytes_per_device"] >= 0 and p["peak_bytes_per_device"] > 0, p
assert "fc1.weight" in d["shardings"] or "conv1.weight" in d["shardings"], d["shardings"]
PY
  then ok "$name: inspect --json $*"; else bad "$name: inspect --json $*: $(head -c 300 "$tmp/$name.err")"; fi
}
json jauto --model mlp --mesh data=2,model=2 --auto-shard
json jhand --model mlp --mesh data=2,model=2
json jcnn --model cnn --batch 16 --mesh a=4 --auto-shard

# quality through the CLI, the GPT too (its Megatron layout is the CLI's): the plan's modeled step (the
# solver's model of the global graph, --analytic) is
# at most the best of the hand layouts' + 5% on 4 devices (data, model, data x model, fsdp x model)
pred() { "$tessel" inspect --json --analytic "$@" 2>/dev/null | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])'; }
for mdl in gpt resnet20; do
  best=""
  for hm in data=4 model=4 data=2,model=2 fsdp=2,model=2; do
    [ "$mdl" = resnet20 ] && [ "${hm#*model}" != "$hm" ] && continue # the CNNs have no model-parallel layout
    v=$(pred --model "$mdl" --batch 16 --mesh "$hm") || continue
    best=$(/usr/bin/python3 -c "print(min(float('$v'), float('${best:-inf}')))")
  done
  for am in a=4 a=2,b=2; do
    v=$(pred --model "$mdl" --batch 16 --mesh "$am" --auto-shard)
    if [ -n "$v" ] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$v') <= 1.05 * float('$best') else 1)"; then
      ok "$mdl on $am: auto $v ms <= best hand $best ms + 5%"
    else bad "$mdl on $am: auto '$v' ms vs best hand $best ms"; fi
  done
done

TESSEL_NUM_THREADS=2 timeout -k 5 120 "$tessel" inspect --model mlp --mesh a=2,b=2 --auto-shard --no-graph \
  --no-program >"$tmp/explain.out" 2>&1
if grep -q "ILP optimal" "$tmp/explain.out" && grep -q "runner-up" "$tmp/explain.out" &&
  grep -q "fc1.weight " "$tmp/explain.out"; then ok "inspect --auto-shard explains the plan"
else bad "inspect --auto-shard: $(head -c 400 "$tmp/explain.out")"; fi
TESSEL_NUM_THREADS=2 timeout -k 5 120 "$tessel" inspect --model resnet20 --batch 8 --mesh a=2,b=2 --auto-shard \
  --time-limit 0.000001 --no-graph --no-program >"$tmp/greedy.out" 2>&1
if grep -q "greedy fallback" "$tmp/greedy.out"; then ok "a tiny --time-limit: the greedy plan, reported"
else bad "--time-limit 0.000001: $(head -c 400 "$tmp/greedy.out")"; fi
expect nomem 1 "smallest achievable modeled peak" inspect --model mlp --mesh a=4 --auto-shard --memory-limit 1000

# tessel plan: 512 devices predicted without running (hand layout and solver), an H100 description
for layout in "" --auto-shard; do
  if timeout -k 5 120 "$tessel" plan --model mlp --mesh data=64,model=8 $layout --device "$(dirname "$0")/../devices/h100-sxm.txt" \
    --json >"$tmp/plan.out" 2>"$tmp/plan.err" && /usr/bin/python3 - "$tmp/plan.out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = d["predicted"]
assert d["devices"] == 512 and p["step_ms"] > 0 and p["peak_bytes_per_device"] > 0 and p["fits"], d
PY
  then ok "plan --mesh data=64,model=8 ${layout:-(hand)}: $(head -c 200 "$tmp/plan.out")"; else bad "plan $layout: $(head -c 300 "$tmp/plan.err")"; fi
done
printf 'flops_per_s.f32 = 1e12\nbogus = 3\n' >"$tmp/dev.txt"
expect baddev 2 "unknown key 'bogus'" plan --mesh data=4 --device "$tmp/dev.txt"
expect badrounds 2 "rounds: expected 1 to 9, got '0'" plan --calibrate "$tmp/never.txt" --rounds 0
expect roundsalone 2 "rounds: only with --calibrate" plan --mesh data=4 --rounds 2

# the calibration: written by an explicit --calibrate FILE, read back as a
# device file and as the cache when its key (CPU model, threads) is this machine's
# (timeout 180 s: a hang guard only; on a loaded machine the measurement took 75 s)
if TESSEL_NUM_THREADS=2 timeout -k 5 180 "$tessel" plan --calibrate "$tmp/cal/calibration.txt" >"$tmp/cal.out" 2>&1 &&
  grep -q "^kernel.conv_bwd_filter = " "$tmp/cal/calibration.txt" && grep -q "^kernel.attention = " "$tmp/cal/calibration.txt" && grep -q "^allreduce.8.latency_s = " "$tmp/cal/calibration.txt" &&
  grep -q "^allreduce.8.busy_s = " "$tmp/cal/calibration.txt" && grep -q "^shared_efficiency.8 = " "$tmp/cal/calibration.txt" &&
  [ "$(grep -c "^kernel\.[a-z_]* = .*# .*; 3 rounds: spread [0-9]*%$" "$tmp/cal/calibration.txt")" = 14 ] &&
  grep -q "^kernel classes over 3 rounds (1 thread): largest spread" "$tmp/cal.out"; then
  ok "plan --calibrate writes every kernel class (3 rounds and their spread), the all-reduce alpha/beta, busy wait and shared efficiency"
else
  bad "plan --calibrate: $(tail -3 "$tmp/cal.out")"
fi
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
