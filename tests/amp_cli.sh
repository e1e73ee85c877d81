#!/usr/bin/env bash
# amp_cli.sh BUILD_DIR — mixed precision through the CLI:
#  - `tessel train --amp bf16` and `--amp f16` train ResNet-20 on synthetic
#    data (3 steps, batch 16): the AMP banner, the step lines of the log
#    contract, f16's loss_scale / skipped_steps fields, the AmpLossScale
#    metric and the peak-memory summary line;
#  - `tessel inspect --amp bf16` shows the contractions in bf16 and the
#    converts; without --amp no bf16 node appears;
#  - bad input: an unknown --amp value and --sync-bn without --parallel ddp
#    are usage errors naming the value.
set -u
build="${1:?usage: amp_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad

run() { # run NAME ARGS...: a short run, JSON log in $tmp/NAME.json
  local name="$1" rc=0
  shift
  TESSEL_NUM_THREADS=2 "$tessel" train --model resnet20 --dataset synthetic --steps 3 --batch 16 --eval-batch 1000 \
    --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train $* exits 0"; else bad "train $* exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}

run bf16 --amp bf16
run f16 --amp f16 --metrics "$tmp/f16.metrics.json"
for name in bf16 f16; do
  if grep -q "^AMP: $name autocast" "$tmp/$name.out"; then ok "$name: AMP banner"; else bad "$name: no AMP banner"; fi
  n=$(grep -c '^{"step":[0-9]*,"loss":[-0-9.e]*,"step_ms":[0-9.]*' "$tmp/$name.json" 2>/dev/null || echo 0)
  if [ "$n" -eq 3 ]; then ok "$name: 3 step lines of the log contract"; else bad "$name: $n step lines"; fi
  if grep -q "^memory: step plan .* MiB .* peak RSS .* MiB" "$tmp/$name.out"; then ok "$name: peak memory line"; else
    bad "$name: no peak memory line"; fi
done
if grep -q '"loss_scale":65536,"skipped_steps":0}' "$tmp/f16.json"; then ok "f16: loss_scale 65536 in the log"; else
  bad "f16: log lacks loss_scale: $(head -1 "$tmp/f16.json")"; fi
if grep -q "^amp: f16 loss scale 65536 after 3 steps, 0 updates skipped" "$tmp/f16.out"; then ok "f16: scaler summary"
else bad "f16: scaler summary: $(grep '^amp:' "$tmp/f16.out")"; fi
if grep -q '"AmpLossScale"' "$tmp/f16.metrics.json" && grep -q '"PeakRSS"' "$tmp/f16.metrics.json"; then
  ok "f16: AmpLossScale and PeakRSS metrics"; else bad "f16: metrics lack AmpLossScale/PeakRSS"; fi

"$tessel" inspect --model resnet20 --batch 4 --amp bf16 --no-graph >"$tmp/insp.out" 2>&1
for op in conv2d conv2d_bwd_data conv2d_bwd_filter dot_general convert; do
  if grep -Eq "^$op +bf16 +[0-9]+" "$tmp/insp.out"; then ok "inspect --amp bf16: $op in bf16"; else
    bad "inspect --amp bf16: no bf16 $op row"; fi
done
if grep -q "= convert(.*: bf16\[" "$tmp/insp.out"; then ok "inspect --amp bf16: the program shows the converts"; else
  bad "inspect --amp bf16: no convert in the program"; fi
"$tessel" inspect --model resnet20 --batch 4 --no-graph >"$tmp/insp32.out" 2>&1
if ! grep -q "bf16\[" "$tmp/insp32.out"; then ok "inspect without --amp: no bf16"; else bad "inspect: bf16 without --amp"; fi

expect_usage() { # expect_usage PATTERN ARGS...: exit 2 before training, message matches
  local pat="$1" rc=0
  shift
  "$tessel" train "$@" >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$pat" "$tmp/e.err" && ! grep -q '"step"' "$tmp/e.out"; then
    ok "train $* is refused: $(head -1 "$tmp/e.err")"
  else
    bad "train $* (exit $rc): $(head -2 "$tmp/e.err")"
  fi
}
expect_usage "fp8" --model resnet20 --dataset synthetic --amp fp8 --steps 1
expect_usage "sync-bn is for --parallel ddp" --model resnet20 --dataset synthetic --sync-bn --steps 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
