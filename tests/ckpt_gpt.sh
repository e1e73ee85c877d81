#!/usr/bin/env bash
# ckpt_gpt.sh BUILD_DIR — checkpoints of `tessel train --model gpt` (a tiny
# GPT: 2 layers, d_model 32, 2 heads, seq 16, vocab 64, synthetic tokens,
# batch 4, AdamW with clipping, 8 steps, a save every 4):
#  - --resume from step 4 logs steps 5..8 exactly as the uninterrupted run,
#    on 1 device and on the Megatron meshes model=2 and data=2,model=2;
#  - a checkpoint saved on model=2 resumes on 1 device and on data=2,model=2
#    within 1e-4 relative (the SPMD tolerance), one saved on 1 device on model=2;
#  - model=2 stores the sharded weights in blocks (inspect), and the export
#    has nanoGPT's names and shapes (c_attn (3C, C), tests/ckpt_gpt_names.py);
#  - --init-from the export loads (nanoGPT's merged c_attn read back).
# The logits of a PyTorch GPT loaded from an export: tests/test_ckpt_gpt.c.
set -u
build="${1:?usage: ckpt_gpt.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_NUM_THREADS=2 OMP_WAIT_POLICY=passive
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
gpt=(--model gpt --layers 2 --d-model 32 --heads 2 --seq 16 --vocab 64 --dataset synthetic --batch 4 --steps 8
  --eval-every 1000 --eval-batches 1 --seed 3)

train() { # train LOG ARGS...: output in LOG.out, JSON log LOG.jsonl
  local log="$1"
  shift
  timeout -k 5 120 "$tessel" train "${gpt[@]}" --log-json "$tmp/$log.jsonl" "$@" >"$tmp/$log.out" 2>&1
}
# same_losses A B FIRST LAST [TOL]: steps FIRST..LAST of logs A and B agree (exactly without TOL)
same_losses() {
  python3 - "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" "$4" "${5:-0}" <<'PY'
import json, sys
a, b, first, last, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def losses(p):
    return {d["step"]: d["loss"] for d in map(json.loads, open(p)) if "step" in d and "loss" in d}
la, lb = losses(a), losses(b)
for s in range(first, last + 1):
    if s not in la or s not in lb:
        sys.exit(f"step {s} missing")
    x, y = la[s], lb[s]
    if (tol == 0 and x != y) or abs(x - y) > tol * max(abs(x), 1e-30):
        sys.exit(f"step {s}: {x!r} vs {y!r}")
PY
}

# 1. exact resume on the same mesh: 1 device, model=2, data=2,model=2
for mesh in one model=2 data=2,model=2; do
  m=(); [ "$mesh" = one ] || m=(--mesh "$mesh")
  n=${mesh//[=,]/_}
  if train "s_$n" "${m[@]}" --save-dir "$tmp/S_$n" --save-every 4 && [ -d "$tmp/S_$n/step-00000004" ] &&
     train "r_$n" "${m[@]}" --resume "$tmp/S_$n/step-00000004" && grep -q "resume: step 4 of 8" "$tmp/r_$n.out" &&
     same_losses "s_$n" "r_$n" 5 8; then
    ok "gpt on $mesh: --resume from step 4 logs steps 5..8 exactly"
  else bad "gpt exact resume on $mesh"; tail -n 3 "$tmp/s_$n.out" "$tmp/r_$n.out"; fi
done

# 2. another mesh within 1e-4: model=2 -> 1 device, -> data=2,model=2; 1 device -> model=2
if train x1 --resume "$tmp/S_model_2/step-00000004" && same_losses s_model_2 x1 5 8 1e-4 &&
   train x2 --mesh data=2,model=2 --resume "$tmp/S_model_2/step-00000004" && same_losses s_model_2 x2 5 8 1e-4 &&
   train x3 --mesh model=2 --resume "$tmp/S_one/step-00000004" && same_losses s_one x3 5 8 1e-4; then
  ok "gpt resume across meshes (model=2 -> 1 device, data=2,model=2; 1 device -> model=2) within 1e-4"
else bad "gpt resume across meshes"; for f in "$tmp"/x*.out; do tail -n 3 "$f"; done; fi

# 3. model=2 keeps c_attn in blocks; the export has nanoGPT's names and shapes
if "$tessel" ckpt inspect "$tmp/S_model_2" >"$tmp/inspect.out" 2>&1 &&
   grep -E "transformer\.h\.0\.attn\.c_attn\.weight .*model" "$tmp/inspect.out" >/dev/null; then
  ok "inspect: c_attn.weight saved sharded on model=2"
else bad "inspect of the model=2 checkpoint"; head -20 "$tmp/inspect.out"; fi
if "$tessel" ckpt export "$tmp/S_model_2" --out "$tmp/gpt.safetensors" >"$tmp/export.out" 2>&1 &&
   /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/ckpt_gpt_names.py" "$tmp/gpt.safetensors" 2 32 16 64 \
     >"$tmp/names.out" 2>&1; then
  ok "export: nanoGPT's names and shapes ($(tail -1 "$tmp/names.out"))"
else bad "export names/shapes"; cat "$tmp/export.out" "$tmp/names.out"; fi

# 4. --init-from the export (its merged c_attn read back into (3, C, C))
if train i --init-from "$tmp/gpt.safetensors" && grep -q "init: model weights from" "$tmp/i.out"; then
  ok "--init-from the GPT export"
else bad "--init-from the GPT export"; tail -n 3 "$tmp/i.out"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
