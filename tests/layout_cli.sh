#!/usr/bin/env bash
# layout_cli.sh BUILD_DIR — channels-last through the CLI (`--layout nchw|nhwc`):
#  - `tessel train --model resnet20` (synthetic, batch 16, 4 steps) runs NHWC by
#    default (stop 34), says so and follows the `--layout nchw` run's loss curve within 1e-4 (other convolution
#    kernels, so other roundings: measured 6.7e-6);
#  - the compile cache keys the layout: with one TESSEL_CACHE_DIR the NHWC run
#    loads nothing the NCHW run stored, and a second NCHW run loads its programs;
#  - checkpoints carry OIHW parameters either way: a checkpoint saved under one
#    layout resumes under the other, steps 3-4 within 1e-4 of the saving run's;
#  - `tessel inspect --layout nhwc` names the layout and compiles NHWC
#    convolutions; without the flag the ResNet is NHWC too; on data=2 both layouts
#    have the same collectives and bytes;
#  - errors: --layout nhwc for a model without a channels-last build (cnn, mlp)
#    and an unknown value are usage errors (exit 2) naming the value.
set -u
build="${1:?usage: layout_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, compare, expect
export TESSEL_NUM_THREADS=2
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
cache="$tmp/cache"

run() { # run NAME ARGS...: 4 ResNet-20 steps, log $tmp/NAME.json, metrics $tmp/NAME.metrics.json
  local name="$1" rc=0
  shift
  TESSEL_CACHE_DIR="$cache" "$tessel" train --model resnet20 --dataset synthetic --steps 4 --batch 16 \
    --eval-batch 1000 --log-json "$tmp/$name.json" --metrics "$tmp/$name.metrics.json" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train $name ($*) exits 0"
  else bad "train $name ($*) exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}
counter() { # counter NAME RUN -> the metrics counter (0 when absent)
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[2]))["counters"].get(sys.argv[1], 0))' \
    "$1" "$tmp/$2.metrics.json" 2>/dev/null || echo ERR
}
# near REF NAME FIRST LAST: steps FIRST..LAST of NAME's log within 1e-4 (relative) of REF's
near() {
  if /usr/bin/python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "$4" <<'PY'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "step" in r}
a, b, first, last = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in range(first, last + 1))
print(f"  worst relative loss difference {worst:.3g}")
assert worst <= 1e-4, worst
PY
  then ok "$2 steps $3-$4 within 1e-4 of $1"; else bad "$2 steps $3-$4 differ from $1"; fi
}

run nchw --layout nchw --save-dir "$tmp/A" --save-every 2
run nhwc --save-dir "$tmp/B" --save-every 2
if grep -q '^layout: nhwc' "$tmp/nhwc.out" && ! grep -q '^layout:' "$tmp/nchw.out"; then
  ok "the default run says its layout: nhwc"
else bad "layout line: $(grep '^layout' "$tmp/nhwc.out" "$tmp/nchw.out")"; fi
near nchw nhwc 1 4
h=$(counter PersistentCacheHit nhwc) m=$(counter PersistentCacheMiss nhwc)
if [ "$h" = 0 ] && [ "$m" != ERR ] && [ "$m" -ge 1 ]; then
  ok "cache: the nhwc run loads none of nchw's programs ($m misses)"
else bad "cache: the nhwc run: $h hits, $m misses"; fi

run a_on_nhwc --layout nhwc --resume "$tmp/A/step-00000002"
run b_on_nchw --layout nchw --resume "$tmp/B/step-00000002"
near nchw a_on_nhwc 3 4
near nhwc b_on_nchw 3 4
h=$(counter PersistentCacheHit b_on_nchw)
if [ "$h" != ERR ] && [ "$h" -ge 1 ]; then ok "cache: a second nchw run loads its programs ($h hits)"
else bad "cache: the second nchw run: $h hits"; fi

"$tessel" inspect --model resnet20 --batch 4 --layout nhwc --no-graph >"$tmp/insp.out" 2>&1
"$tessel" inspect --model resnet20 --batch 4 --no-graph >"$tmp/insp0.out" 2>&1
if grep -q '^tessel inspect: resnet20 .*, layout nhwc$' "$tmp/insp.out" && grep -q 'conv2d(.* nhwc' "$tmp/insp.out"
then ok "inspect --layout nhwc: the header and NHWC convolutions"
else bad "inspect --layout nhwc: $(head -2 "$tmp/insp.out")"; fi
if grep -q ', layout nhwc$' "$tmp/insp0.out" && grep -q 'conv2d(.* nhwc' "$tmp/insp0.out"; then ok "inspect: nhwc by default"
else bad "inspect default: $(head -1 "$tmp/insp0.out")"; fi

# data parallel: the same collectives and bytes in both layouts (130 and 2177452 bytes at batch 4)
for L in nchw nhwc; do
  "$tessel" inspect --model resnet20 --batch 4 --mesh data=2 --layout $L --no-graph --no-program 2>&1 |
    grep '^== collectives per step' >"$tmp/coll_$L.txt"
done
if [ -s "$tmp/coll_nchw.txt" ] && cmp -s "$tmp/coll_nchw.txt" "$tmp/coll_nhwc.txt"; then
  ok "data=2: nhwc sends what nchw sends ($(cat "$tmp/coll_nhwc.txt"))"
else bad "data=2 collectives: nchw '$(cat "$tmp/coll_nchw.txt")', nhwc '$(cat "$tmp/coll_nhwc.txt")'"; fi

expect train_cnn 2 "--layout nhwc is for the resnets .*, not --model cnn" train --model cnn --layout nhwc
expect train_value 2 "--layout: unknown layout 'NHWC' (valid: nchw, nhwc)" train --model resnet20 --layout NHWC
expect inspect_mlp 2 "--layout nhwc is for the resnets .*, not --model mlp" inspect --layout nhwc
# the cost model prices a convolution by its FLOPs whatever the layout (the filter gradient's
# N * OH * OW rows were read as dy's dims 0, 2, 3: NHWC's (N, OW, O); priced 4x too high on ResNet-20)
for L in nchw nhwc; do
  TESSEL_CALIBRATION=none "$tessel" inspect --model resnet20 --batch 8 --layout $L --json 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; o = json.load(sys.stdin)["ops"]
print(" ".join("%s=%.6g" % (k, o[k]["ms"]) for k in sorted(o) if k.startswith("conv2d")))' >"$tmp/price_$L.txt"
done
if [ -s "$tmp/price_nchw.txt" ] && cmp -s "$tmp/price_nchw.txt" "$tmp/price_nhwc.txt"; then
  ok "inspect: the convolutions' prices are the same in both layouts ($(cat "$tmp/price_nhwc.txt"))"
else bad "convolution prices: nchw '$(cat "$tmp/price_nchw.txt")', nhwc '$(cat "$tmp/price_nhwc.txt")'"; fi
expect plan_cnn 2 "--layout nhwc is for the resnets .*, not --model cnn" plan --model cnn --mesh data=2 --layout nhwc
expect inspect_value 2 "--layout: unknown layout 'cl' (valid: nchw, nhwc)" inspect --model resnet50 --layout cl
expect train_nchw_cnn 0 "" train --model cnn --layout nchw --steps 1 --batch 8 --eval-batch 10000 --dataset synthetic

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
