#!/usr/bin/env bash
# amp_cli.sh BUILD_DIR — mixed precision through the CLI:
#  - `tessel train --amp bf16` and `--amp f16` train ResNet-20 on synthetic
#    data (3 steps, batch 16): the AMP banner, the step lines of the log
#    contract, f16's loss_scale / skipped_steps fields, the AmpLossScale
#    metric and the peak-memory summary line;
#  - `tessel inspect --amp bf16` shows the contractions in bf16 and the
#    converts; without --amp no bf16 node appears;
#  - --parallel ddp under mpirun -n 2 (2 steps, global batch 16): with
#    --sync-bn the loss curve equals one device's on the whole batch (1e-4:
#    batch-norm statistics of the global batch); without it the replicas use
#    their own batches' statistics (another first loss) and stay identical
#    (--check-replicas 1);
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
for op in conv2d conv2d_bwd_data dot_general convert; do
  if grep -Eq "^$op +bf16 +[0-9]+" "$tmp/insp.out"; then ok "inspect --amp bf16: $op in bf16"; else
    bad "inspect --amp bf16: no bf16 $op row"; fi
done
# the filter gradient reads bf16 and writes f32 (oneDNN's f32 diff_weights)
if grep -Eq "^conv2d_bwd_filter +bf16>f32 +[0-9]+" "$tmp/insp.out" && ! grep -Eq "^conv2d_bwd_filter +bf16 " "$tmp/insp.out"
then ok "inspect --amp bf16: conv2d_bwd_filter bf16>f32"; else bad "inspect --amp bf16: no bf16>f32 conv2d_bwd_filter row"; fi
if grep -q "= convert(.*: bf16\[" "$tmp/insp.out"; then ok "inspect --amp bf16: the program shows the converts"; else
  bad "inspect --amp bf16: no convert in the program"; fi
"$tessel" inspect --model resnet20 --batch 4 --no-graph >"$tmp/insp32.out" 2>&1
if ! grep -q "bf16\[" "$tmp/insp32.out"; then ok "inspect without --amp: no bf16"; else bad "inspect: bf16 without --amp"; fi

if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  run one --steps 2
  for mode in sync local; do
    flag=()
    [ "$mode" = sync ] && flag=(--sync-bn)
    rc=0
    TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n 2 --oversubscribe --bind-to none "$tessel" train --model resnet20 \
      --dataset synthetic --steps 2 --batch 16 --eval-batch 1000 --parallel ddp --check-replicas 1 "${flag[@]}" \
      --log-json "$tmp/ddp_$mode.json" >"$tmp/ddp_$mode.out" 2>"$tmp/ddp_$mode.err" || rc=$?
    if [ "$rc" -eq 0 ]; then ok "ddp ${flag[*]} (2 processes, --check-replicas 1) exits 0"; else
      bad "ddp ${flag[*]}: exit $rc: $(grep -m2 tessel "$tmp/ddp_$mode.err")"; fi
  done
  compare one ddp_sync 2
  if /usr/bin/python3 - "$tmp/one.json" "$tmp/ddp_local.json" <<'PY'
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(p)) if "loss" in r] for p in sys.argv[1:3])
assert abs(a[0] - b[0]) > 1e-5 * abs(a[0]), (a[0], b[0])
PY
  then ok "ddp without --sync-bn: local statistics (another first loss)"; else bad "ddp without --sync-bn: same first loss as 1 device"; fi
else
  echo "skip ddp --sync-bn: no mpirun"
fi

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
