#!/usr/bin/env bash
# resnet_train.sh BUILD_DIR — the ResNets through `tessel train`:
#  - ResNet-20 on Fashion-MNIST (batch norm with global statistics under SPMD)
#    logs the 1-device losses on --mesh data=2 and fsdp=2 (1e-4 relative: the
#    partitioned sums add in another order). The first loss already fails if
#    a shard normalized with its own batch statistics. Only 2 steps: in f32
#    the run is chaotic. Measured (SGD, batch 32, 3-step cosine schedule):
#    data=2 and fsdp=2 equal 1 device exactly at step 1, 2e-7 apart at step
#    2, 4e-4 at step 3 (10-step schedule: 9e-7 at step 3, 1e-2 at step 10) —
#    rounding amplified 10-1000x per step, not a partitioning error;
#    tests/test_resnet_spmd.c holds the partitioned ResNet to 1 device in f64
#    over 5 steps;
#  - ResNet-18 trains on synthetic data (2 steps, batch 8) and logs its steps;
#  - bad input is an early error naming the value: ResNet-50 on 28x28 images,
#    synthetic data for the MLP.
set -u
build="${1:?usage: resnet_train.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
small_test_set 200 # $fm: the training set, 200 test images (the losses are checked, not the accuracy; a
# ResNet-20 evaluation of 1000 images was a third of this test's CPU: 33-37 s, 23 s with 200)

run() { # run NAME ARGS...: a short run, JSON log in $tmp/NAME.json
  local name="$1" rc=0
  shift
  TESSEL_NUM_THREADS=2 "$tessel" train --epochs 1 --eval-batch 2000 --log-json "$tmp/$name.json" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train $* exits 0"; else bad "train $* exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}


run one --data-dir "$fm" --model resnet20 --optimizer sgd --steps 2 --batch 32
run dp --data-dir "$fm" --model resnet20 --optimizer sgd --steps 2 --batch 32 --mesh data=2
run fsdp --data-dir "$fm" --model resnet20 --optimizer sgd --steps 2 --batch 32 --mesh fsdp=2
compare one dp 2
compare one fsdp 2
for name in dp fsdp; do
  if grep -q "on 2 virtual CPU devices" "$tmp/$name.out"; then ok "$name ran on 2 devices"; else
    bad "$name: not partitioned: $(grep -m1 SPMD "$tmp/$name.out")"; fi
done

run synth --model resnet18 --dataset synthetic --steps 2 --batch 8 --eval-batch 1000
n=$(grep -c '"step"' "$tmp/synth.json" 2>/dev/null || echo 0)
if [ "$n" -eq 2 ]; then ok "resnet18 on synthetic data logs 2 steps"; else bad "resnet18 synthetic: $n step lines"; fi

expect_error() { # expect_error PATTERN ARGS...: exits non-zero before training, message matches
  local pat="$1" rc=0
  shift
  "$tessel" train "$@" >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
  if [ "$rc" -ne 0 ] && grep -q "$pat" "$tmp/e.err" && ! grep -q '"step"' "$tmp/e.out"; then
    ok "train $* is refused: $(head -1 "$tmp/e.err")"
  else
    bad "train $* (exit $rc): $(head -2 "$tmp/e.err")"
  fi
}
expect_error "28x28 is too small.*32x32" --model resnet50 --steps 1
expect_error "synthetic is for the convolutional models" --model mlp --dataset synthetic --steps 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
