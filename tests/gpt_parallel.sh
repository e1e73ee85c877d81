#!/usr/bin/env bash
# gpt_parallel.sh BUILD_DIR — the GPT's tensor, vocab and sequence
# parallelism (issue 12) through `tessel train --mesh`: a tiny GPT (2 layers,
# d_model 32, 4 heads, seq 16, vocab 64, synthetic tokens, batch 8, AdamW with
# clipping) trained 30 steps on --mesh model=2, model=4, data=2,model=2 and
# fsdp=2,model=2, each with and without --sequence-parallel, in one process,
# and model=2 (with and without) over 2 processes under mpirun, logs the
# 1-device loss curve within 1e-4 relative. `tessel inspect --model gpt`
# lists the collectives (pinned counts per kind for this config) and the
# per-device parameter + optimizer bytes: at model=2 half of 1 device's, up
# to the norms, biases and position table every device keeps whole. Bad
# input: heads, vocab or seq (with --sequence-parallel) not dividing the
# model axis, and --sequence-parallel without one, are clear errors.
set -u
build="${1:?usage: gpt_parallel.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, compare, expect
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

gpt=(--model gpt --layers 2 --d-model 32 --heads 4 --seq 16 --vocab 64 --dataset synthetic --batch 8 --steps 30
  --eval-every 1000 --eval-batches 1 --seed 5)
run() { # run NAME NP ARGS...: 30 steps (NP 0: one process), JSON log in $tmp/NAME.json
  local name="$1" np="$2"
  shift 2
  local rc=0
  if [ "$np" = 0 ]; then
    TESSEL_NUM_THREADS=1 timeout -k 5 120 "$tessel" train "${gpt[@]}" --log-json "$tmp/$name.json" "$@" \
      >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  else
    TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n "$np" --oversubscribe --bind-to none "$tessel" train "${gpt[@]}" \
      --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then ok "$name: train --model gpt $* ($np processes) exits 0"; else bad "$name: exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}

run one 0
n=0
for mesh in model=2 model=4 data=2,model=2 fsdp=2,model=2; do
  n=$((n + 1))
  run "m$n" 0 --mesh "$mesh"
  run "m${n}sp" 0 --mesh "$mesh" --sequence-parallel
  compare one "m$n" 30
  compare one "m${n}sp" 30
done
# the runs really were partitioned (a mesh flag ignored would pass the above)
for pair in "m2sp:mesh model=4 on 4" "m4sp:mesh fsdp=2,model=2 on 4"; do
  if grep -q "${pair#*:} virtual CPU devices" "$tmp/${pair%%:*}.out"; then ok "${pair%%:*} ran on its mesh"; else
    bad "${pair%%:*}: no '${pair#*:} virtual CPU devices' in: $(grep -m1 SPMD "$tmp/${pair%%:*}.out")"; fi
done
if command -v mpirun >/dev/null; then
  run mpi 2 --mesh model=2
  run mpisp 2 --mesh model=2 --sequence-parallel
  compare one mpi 30
  compare one mpisp 30
else
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
fi

# inspect: the collectives of this config, by kind (f32 activations (8, 16, 32): 16384 bytes)
small=(--model gpt --layers 2 --d-model 32 --heads 4 --seq 16 --vocab 64 --batch 8 --no-graph --no-program)
inspect() { # inspect NAME ARGS...: $tmp/NAME.txt
  local name="$1" rc=0
  shift
  "$tessel" inspect "${small[@]}" "$@" >"$tmp/$name.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then ok "inspect $*"; else bad "inspect $* exit $rc: $(tail -3 "$tmp/$name.txt")"; fi
}
has() { # has NAME COUNT KIND AXES BYTES: the summary has that line
  if grep -Eq "^ +$2 +$3 +$4 +[0-9]+ +$5\$" "$tmp/$1.txt"; then ok "$1: $2 x $3 over $4 of $5 bytes"; else
    bad "$1: no '$2 $3 $4 $5' in: $(sed -n '/by kind/,/^$/p' "$tmp/$1.txt")"; fi
}
inspect i1
inspect tp --mesh model=2
inspect sp --mesh model=2 --sequence-parallel
inspect dtp --mesh data=2,model=2
# tensor parallel: 4 per block (attention and MLP, forward and backward), the
# embedding lookup and the head's input gradient; the cross-entropy's max,
# sum of exponentials and label logit over B*T rows
has tp 10 all-reduce model 16384
has tp 3 all-reduce model 512
# sequence parallel: each of those is a reduce-scatter + all-gather pair
has sp 10 reduce-scatter model 16384
has sp 10 all-gather model 16384
has dtp 10 all-reduce model 8192
# no device program (with its memory plan) holds an f32 buffer of the full
# (B, T, V) = (8, 16, 64) logits, flat (128, 64) or not; one device does
prog=(--model gpt --layers 2 --d-model 32 --heads 4 --seq 16 --vocab 64 --batch 8 --no-graph)
"$tessel" inspect "${prog[@]}" >"$tmp/one_prog.txt" 2>&1
"$tessel" inspect "${prog[@]}" --mesh data=2,model=2 >"$tmp/tp_prog.txt" 2>&1
full='f32\[(8,16,64|128,64)\]'
if grep -Eq "$full" "$tmp/one_prog.txt" && ! sed -n '/== program of device/,$p' "$tmp/tp_prog.txt" | grep -Eq "$full"; then
  ok "data=2,model=2: no f32 (B, T, V) logits in the device program (1 device has them)"
else bad "data=2,model=2: full logits in the device program, or the check cannot see them on 1 device"; fi
# parameters + optimizer state per device: model=2 holds half of 1 device's,
# up to the tensors every device keeps whole
read -r local whole repl < <(sed -n 's/^per device \([0-9]*\) (1 device: \([0-9]*\); \([0-9]*\) of them.*/\1 \2 \3/p' "$tmp/tp.txt")
read -r one_local _ _ < <(sed -n 's/^per device \([0-9]*\) (1 device: \([0-9]*\); \([0-9]*\) of them.*/\1 \2 \3/p' "$tmp/i1.txt")
if [ -n "${local:-}" ] && [ "$one_local" = "$whole" ] && [ $(((whole - repl) / 2 + repl)) = "$local" ] &&
  [ $((repl * 20)) -lt "$whole" ]; then
  ok "model=2: $local bytes of parameters + optimizer per device, 1 device $whole ($repl whole everywhere)"
else bad "model=2: per-device parameter bytes '${local:-?}' vs 1 device '${one_local:-?}'/'${whole:-?}' (whole ${repl:-?})"; fi

# bad input, before training
expect heads 1 "heads = 3" train "${gpt[@]}" --heads 3 --d-model 33 --mesh model=2
expect vocab 1 "vocab = 63" train "${gpt[@]}" --vocab 63 --mesh model=2
expect seq 1 "seq = 15" train "${gpt[@]}" --seq 15 --mesh model=2 --sequence-parallel
expect nomesh 1 "sequence parallelism needs" train "${gpt[@]}" --sequence-parallel
expect notgpt 2 "sequence-parallel" train --model mlp --sequence-parallel --steps 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
