#!/usr/bin/env bash
# autoshard_plan.sh BUILD_DIR — auto-sharding from the CLI, its planning checks (split from
# tests/autoshard_cli.sh, which trains and calibrates: here only compiles and one-thread solves,
# so this runs beside the tests that keep both cores busy):
#  - `tessel inspect --json` prints the prediction and the inputs'
#    shardings, with and without --auto-shard;
#  - `inspect --auto-shard` explains the plan; a tiny --time-limit gives
#    the greedy plan and says so; an impossible --memory-limit is an error
#    naming the smallest achievable peak;
#  - quality from the CLI for the GPT and ResNet-20 (batch 16): the plan's
#    predicted step <= the best hand layout's (data, model, data x model,
#    fsdp x model) + 5% on 4 devices, 1-D and 2x2;
#  - `tessel plan` predicts 512 devices (hand and --auto-shard) against
#    devices/h100-sxm.txt without running; a bad device file is an error.
set -u
build="${1:?usage: autoshard_plan.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, expect
export TESSEL_CALIBRATION=none # deterministic: the cost model's defaults, never this machine's cache

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

# the solver's model of a hand layout (--analytic) sends what device 0's compiled program sends, within
# 10% (the model prices the collectives the partitioner inserts): it charged the GPT's data=2 layout
# 60.3 MB against the program's 20.4 (an all-gather per AdamW operand and per sum of a sharded gradient),
# data=2,model=2 66.5 against 37.0 (all-gathers at the head-splitting reshapes)
sent() { "$tessel" inspect --json "$@" 2>/dev/null | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["comm_bytes_per_device"])'; }
for mm in gpt:data=2 gpt:data=2,model=2 mlp:data=4; do
  a=$(sent --model "${mm%%:*}" --mesh "${mm#*:}" --analytic) p=$(sent --model "${mm%%:*}" --mesh "${mm#*:}")
  if [ -n "$a" ] && [ -n "$p" ] && /usr/bin/python3 -c "import sys; sys.exit(0 if abs(float('$a') / float('$p') - 1) <= 0.10 else 1)"; then
    ok "$mm: analytic $a bytes sent within 10% of the compiled program's $p"
  else bad "$mm: analytic '$a' bytes sent vs the compiled program's '$p' (10% asked)"; fi
done

# the GPT's plan on 2 devices gathers and scatters what the hand data layout does (ZeRO-1 on the weights'
# rows): every reduce-scatter and all-gather of device 0's program is one of data=2's (kind, dim, shape);
# its weight gradients went to their columns (strided, a block per row) and its updates ran on the whole weight
colls() { "$tessel" inspect --model gpt --layers 2 --no-graph "$@" 2>/dev/null | awk '/^== program/{p=1} p' |
  grep -E '= (reduce_scatter|all_gather)\(' | sed -E 's/^%[0-9]+ = //; s/\(%[0-9]+\)//; s/ group=\[[0-9,]*\]//' | sort; }
colls --mesh data=2 >"$tmp/hand.colls"
colls --mesh a=2 --auto-shard >"$tmp/auto.colls"
extra=$(comm -13 "$tmp/hand.colls" "$tmp/auto.colls")
if [ -s "$tmp/auto.colls" ] && [ "$(wc -l <"$tmp/auto.colls")" -ge 12 ] && [ -z "$extra" ]; then
  ok "gpt a=2 auto: its $(wc -l <"$tmp/auto.colls") reduce-scatters and all-gathers are data=2's"
else bad "gpt a=2 auto: collectives data=2 has not: $(echo "$extra" | head -5 | tr '\n' ';') ($(wc -l <"$tmp/auto.colls") in all)"; fi

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

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
