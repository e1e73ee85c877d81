#!/usr/bin/env bash
# predict_memory.sh BUILD_DIR — the cost model's peak memory against the
# compiled program's memory plan (issue 16: within 5%). For the MLP, CNN,
# ResNet-20 and GPT on a 1-D and a 2-D mesh of 4 devices, hand layout and
# --auto-shard: `tessel inspect` prints the prediction (ts_predict_program:
# device 0's program partitioned, optimized and planned without a client)
# and, from ts_compile on 4 real virtual devices, every device's plan; the
# predicted temporaries must be within 5% of the largest device's arena (the
# number `tessel train` prints as "step plan"), the peak must be inputs +
# arena + outputs, and `tessel plan` (no devices at all) must agree too.
set -u
build="${1:?usage: predict_memory.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_CALIBRATION=none TESSEL_NUM_THREADS=2 # deterministic: the defaults, never a cache
check() { # check NAME ARGS...: inspect's prediction vs its compiled plans
  local name="$1"
  shift
  if ! timeout -k 5 120 "$tessel" inspect --no-graph --no-program "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
    bad "$name: inspect $* failed: $(tail -2 "$tmp/$name.err")"
    return
  fi
  if msg=$(/usr/bin/python3 - "$tmp/$name.out" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r"peak (\d+) bytes \(memory plan: (\d+) bytes of temporaries \+ (\d+) bytes of inputs\)", t)
assert m, "no prediction line"
peak, arena, inputs = map(int, m.groups())
table = t[t.index("== memory per device"):]
real = max(int(r.group(1)) for r in re.finditer(r"^\d+\s+(\d+)\s+\d+\s+\d+$", table, re.M))
err = abs(arena - real) / real
print(f"predicted arena {arena}, compiled {real} ({100 * err:.2f}%), peak {peak}")
assert err <= 0.05, f"predicted temporaries {arena} vs the memory plan's {real}: {100 * err:.1f}% > 5%"
assert inputs < peak and arena < peak, "peak is not inputs + arena + outputs"
PY
  ); then ok "$name: $msg"; else bad "$name: $msg"; fi
}
for model in mlp cnn resnet20 gpt; do
  second=model; [ $model = cnn ] || [ $model = resnet20 ] && second=fsdp
  check "$model-data4" --model $model --batch 8 --mesh data=4
  check "$model-2x2" --model $model --batch 8 --mesh data=2,$second=2
done
check mlp-auto22 --model mlp --batch 8 --mesh a=2,b=2 --auto-shard
check gpt-auto4 --model gpt --batch 8 --mesh a=4 --auto-shard
# tessel plan builds no client: its arena equals inspect's
a=$("$tessel" plan --model resnet20 --batch 8 --mesh data=2,fsdp=2 --json 2>/dev/null |
  /usr/bin/python3 -c 'import json,sys; print(int(json.load(sys.stdin)["predicted"]["arena_bytes"]))')
b=$(grep -o "memory plan: [0-9]* bytes" "$tmp/resnet20-2x2.out" | grep -o "[0-9]*")
if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "plan's arena $a = inspect's"; else bad "plan's arena '$a' != inspect's '$b'"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
