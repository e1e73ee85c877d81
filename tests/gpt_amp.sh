#!/usr/bin/env bash
# gpt_amp.sh BUILD_DIR — `tessel train --model gpt --amp bf16|f16` trains in
# mixed precision (the GPT's options once dropped --amp: the step ran f32
# under the AMP banner). A 1-layer GPT (d 32, seq 16, vocab 64), 3 steps:
#  - bf16's and f16's losses differ from f32's (the matmuls are rounded) but
#    stay within 1e-2 relative of them;
#  - f16's log lines carry loss_scale and skipped_steps (its loss scaler);
#  - `tessel inspect --model gpt --amp bf16` lists bf16 matmuls.
set -u
build="${1:?usage: gpt_amp.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad

tiny=(--model gpt --dataset synthetic --vocab 64 --layers 1 --d-model 32 --heads 2 --seq 16 --batch 4 --steps 3)
for amp in none bf16 f16; do
  rc=0
  TESSEL_NUM_THREADS=2 timeout -k 5 120 "$tessel" train "${tiny[@]}" --amp "$amp" --log-json "$tmp/$amp.json" \
    >"$tmp/$amp.out" 2>"$tmp/$amp.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train --amp $amp exits 0"; else bad "train --amp $amp exit $rc: $(tail -3 "$tmp/$amp.err")"; fi
done

for amp in bf16 f16; do
  if msg=$(/usr/bin/python3 - "$tmp/none.json" "$tmp/$amp.json" "$amp" 2>&1 <<'PY'
import json, sys
def rows(p):
    return [r for r in map(json.loads, open(p)) if "loss" in r]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert len(a) == 3 and len(b) == 3, f"{len(a)} and {len(b)} steps logged, expected 3"
diff = [abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b)]
assert max(diff) > 0, "losses are bit-identical to f32: --amp did nothing"
assert max(diff) <= 1e-2, f"losses differ from f32 by {max(diff):.3g} > 1e-2"
if sys.argv[3] == "f16":
    assert all("loss_scale" in r and "skipped_steps" in r for r in b), "f16 step lines lack loss_scale/skipped_steps"
print(f"worst relative difference from f32 {max(diff):.3g}")
PY
  ); then ok "--amp $amp: $msg"; else bad "--amp $amp: ${msg##*$'\n'}"; fi
done

rc=0
"$tessel" inspect --model gpt --layers 1 --d-model 32 --heads 2 --seq 16 --vocab 64 --batch 4 --amp bf16 \
  >"$tmp/inspect.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && grep -q "dot_general.*bf16\|bf16.*dot_general" "$tmp/inspect.out"; then ok "inspect --amp bf16 lists bf16 matmuls"
else bad "inspect --model gpt --amp bf16 (exit $rc): $(grep -m3 dot_general "$tmp/inspect.out")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
