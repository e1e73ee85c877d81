#!/usr/bin/env bash
# spmd_train.sh BUILD_DIR — `tessel train --mesh` computes what one device
# computes: the MLP trained for 50 steps with --mesh data=8 (data parallel),
# --mesh data=4,model=2 (Megatron MLP on "model"), --mesh fsdp=2, fsdp=4 and
# data=2,fsdp=2 (FSDP: weights and optimizer state sharded on "fsdp"), and
# the MNIST CNN (convolutions, pooling, dropout) for 10 steps with --mesh
# data=2, log the same loss curve as without a mesh. Tolerance:
# |loss - loss_1| <= 1e-4 * max(1, loss_1) at every step (f32; the
# partitioned sums add in another order; measured about 2e-7).
set -u
build="${1:?usage: spmd_train.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
small_test_set # $fm: the training set, 1000 test images (the losses are checked, not the accuracy)

run() { # run NAME MODEL STEPS ARGS...: a short run, JSON log in $tmp/NAME.json
  local name="$1" model="$2" steps="$3"
  shift 3
  local rc=0
  TESSEL_NUM_THREADS=2 "$tessel" train --model "$model" --steps "$steps" --epochs 1 --eval-batch 2000 --data-dir "$fm" \
    --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train --model $model $* exits 0"; else bad "train --model $model $* exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}


run one mlp 50
run dp mlp 50 --mesh data=8
run mp mlp 50 --mesh data=4,model=2
run fsdp2 mlp 50 --mesh fsdp=2
run fsdp4 mlp 50 --mesh fsdp=4
run dfsdp mlp 50 --mesh data=2,fsdp=2
run cnn_one cnn 10
run cnn_dp cnn 10 --mesh data=2

for name in dp mp fsdp2 fsdp4 dfsdp; do compare one "$name" 50; done
compare cnn_one cnn_dp 10
# the runs really were partitioned (a mesh flag ignored would pass the above)
for pair in "dp:mesh data=8 on 8" "fsdp4:mesh fsdp=4 on 4" "dfsdp:mesh data=2,fsdp=2 on 4" "cnn_dp:mesh data=2 on 2"; do
  if grep -q "${pair#*:} virtual CPU devices" "$tmp/${pair%%:*}.out"; then ok "${pair%%:*} ran on its mesh"; else
    bad "${pair%%:*}: no '${pair#*:} virtual CPU devices' in: $(grep -m1 SPMD "$tmp/${pair%%:*}.out")"; fi
done

# errors name the flag
rc=0
"$tessel" train --mesh data --steps 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 0 ] && grep -q -- "--mesh" "$tmp/err"; then ok "bad --mesh is refused"; else bad "--mesh data: exit $rc, $(cat "$tmp/err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
