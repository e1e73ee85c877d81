#!/usr/bin/env bash
# train_profile.sh BUILD_DIR — the host-side flags of `tessel train` (issue 15):
# --log-every N writes the step lines of steps N, 2N, ... with the same losses
# bit for bit as a run that reads every loss back; --profile's record parses and
# its parts add up (host parts to the step, per device compute + exposed
# communication + idle to the execute, the execute near the logged step_ms);
# --profile prints its breakdown for the GPT too;
# --bind is accepted where each device gets a core of its own and refused
# clearly where it cannot; weight-update sharding on mesh data=2 computes the
# same losses bit for bit as the replicated update (bench_train_step A/B).
set -u
build="${1:?usage: train_profile.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, expect

run() { # run NAME ARGS...: a short MLP run on 2 threads logging to $tmp/NAME.json
  local name="$1"
  shift
  local rc=0
  TESSEL_NUM_THREADS=2 timeout -k 5 120 "$tessel" train --model mlp --steps 12 --epochs 1 --eval-batch 2000 \
    --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "$name: train $* exits 0"; else bad "$name: train $* exit $rc: $(head -c 400 "$tmp/$name.err")"; fi
}

# ---- --log-every: every 4th step line, losses equal to reading every step ----
run every1 --mesh data=2
run every4 --mesh data=2 --log-every 4 --profile
if /usr/bin/python3 - "$tmp/every1.json" "$tmp/every4.json" <<'PY'
import json, sys
a = [r for r in map(json.loads, open(sys.argv[1])) if "step" in r]
b = [r for r in map(json.loads, open(sys.argv[2])) if "step" in r]
assert [r["step"] for r in b] == [4, 8, 12], f"--log-every 4 logged steps {[r['step'] for r in b]}"
assert all(set(r) == {"step", "loss", "step_ms"} for r in b), "step lines keep the log contract"
ref = {r["step"]: r["loss"] for r in a}
assert all(r["loss"] == ref[r["step"]] for r in b), f"losses differ: {b} vs {ref}"
PY
then ok "--log-every 4: steps 4, 8, 12 with the every-step losses bit for bit"; else bad "--log-every 4 log"; fi

# ---- --profile: the record parses and its parts add up ----
if /usr/bin/python3 - "$tmp/every4.json" "$tmp/every1.json" <<'PY'
import json, sys
rows = list(map(json.loads, open(sys.argv[1])))
prof = [r["profile"] for r in rows if "profile" in r]
assert len(prof) == 1, f"{len(prof)} profile records"
p = prof[0]
assert p["steps"] == 11, f"profile over {p['steps']} steps (all but the first expected)"
host = p["loader_wait_ms"] + p["upload_ms"] + p["execute_ms"] + p["readback_ms"] + p["other_ms"]
assert abs(host - p["step_ms"]) <= 0.01 * p["step_ms"] + 0.01, f"host parts {host} vs step {p['step_ms']}"
assert all(p[k] >= 0 for k in ("loader_wait_ms", "upload_ms", "readback_ms", "other_ms")), p
assert [d["device"] for d in p["devices"]] == [0, 1], p["devices"]
for d in p["devices"]:
    parts = d["compute_ms"] + d["comm_exposed_ms"] + d["idle_ms"]
    assert d["compute_ms"] > 0 and d["comm_exposed_ms"] + d["comm_hidden_ms"] > 0, d
    # the trace's executes vs the loop's clock around them (a descheduling on a loaded machine lands in one only)
    assert abs(d["execute_ms"] - p["execute_ms"]) <= 0.1 * p["execute_ms"] + 0.2, (d, p["execute_ms"])
    assert abs(parts - d["execute_ms"]) <= 0.02 * d["execute_ms"] + 0.01 or d["idle_ms"] == 0, d
# the logged step_ms (upload to read-back) is what the profile splits into upload + execute + read-back
steps = [r["step_ms"] for r in rows if "step" in r]
mine = p["upload_ms"] + p["execute_ms"] + p["readback_ms"]
print(f"  profile {p['step_ms']:.3f} ms/step; upload+execute+read-back {mine:.3f} ms")
PY
then ok "--profile record parses, parts add up"; else bad "--profile record ($tmp/every4.json)"; fi
if grep -q "^profile: 11 steps" "$tmp/every4.out" && grep -q "^  device 1: compute" "$tmp/every4.out"; then
  ok "--profile prints the breakdown"
else bad "--profile output: $(grep -A3 '^profile' "$tmp/every4.out")"; fi
if [ "$(grep -c '"profile"' "$tmp/every1.json")" -eq 0 ]; then ok "no profile record without --profile"; else bad "profile record without --profile"; fi

# ---- --profile for the GPT too (its run ends with a val loss, not a test accuracy) ----
rc=0
TESSEL_NUM_THREADS=2 timeout -k 5 120 "$tessel" train --model gpt --layers 1 --d-model 64 --heads 2 --seq 32 --batch 4 \
  --steps 3 --profile >"$tmp/gptprof.out" 2>"$tmp/gptprof.err" || rc=$?
if [ "$rc" -eq 0 ] && grep -q "^profile: 2 steps" "$tmp/gptprof.out" && grep -q "^memory: step plan" "$tmp/gptprof.out"; then
  ok "--profile --model gpt prints the breakdown and the memory line"
else bad "--profile --model gpt: exit $rc: $(tail -5 "$tmp/gptprof.out") $(head -c 300 "$tmp/gptprof.err")"; fi

# ---- --bind ----
if command -v taskset >/dev/null && taskset -c 0,1 true 2>/dev/null; then
  run bind2 --mesh data=2 --bind --steps 3
  if grep -q "^bind: device 0 on CPU [0-9]*, device 1 on CPU [0-9]*$" "$tmp/bind2.out"; then ok "--bind says where each device runs"
  else bad "--bind output: $(grep '^bind' "$tmp/bind2.out")"; fi
  rc=0
  TESSEL_NUM_THREADS=2 taskset -c 0 "$tessel" train --model mlp --steps 3 --mesh data=2 --bind >"$tmp/bind1.out" \
    2>"$tmp/bind1.err" || rc=$?
  if [ "$rc" -eq 1 ] && grep -q "bind: 2 devices x 1 thread need 2 cores of their own but this process may run on 1 CPU" "$tmp/bind1.err"; then
    ok "--bind on 1 CPU for 2 devices: refused, exit 1"
  else bad "--bind on 1 CPU: exit $rc: $(cat "$tmp/bind1.err")"; fi
else
  echo "skip --bind checks (no taskset, or fewer than 2 CPUs)"
fi
expect bind_flag 2 "unknown flag '--bind=1'" train --bind=1

# ---- weight-update sharding: the same losses as the replicated update ----
bench="$build/bench_train_step"
a="$(TESSEL_NUM_THREADS=2 "$bench" --model mlp --parallel spmd --devices 2 --steps 3 --warmup 0 2>/dev/null | grep -o 'final_loss=[^ ]*')"
b="$(TESSEL_NUM_THREADS=2 "$bench" --model mlp --parallel spmd --devices 2 --steps 3 --warmup 0 --replicated-update 2>/dev/null | grep -o 'final_loss=[^ ]*')"
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "data=2: sharded update $a = replicated update $b"; else bad "data=2: sharded update '$a' vs replicated '$b'"; fi
if "$tessel" inspect --model mlp --mesh data=2 --no-graph --no-program | grep -q "^reduce-scatter .*bytes=1605632" &&
   "$tessel" inspect --model mlp --mesh data=2 --no-graph --no-program | grep -q "^all-gather .*bytes=1605632"; then
  ok "inspect: fc1's gradient reduce-scattered, its weight all-gathered"
else bad "inspect --mesh data=2: no reduce-scatter / all-gather of fc1"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
