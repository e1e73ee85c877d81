#!/usr/bin/env bash
# holdout_cli.sh BUILD_DIR — `tessel train --holdout N`: the training set's
# last N samples are held out (never trained on) and evaluated each epoch.
#  - a training set whose last 200 samples are the 200 test images, with
#    --holdout 200, trains exactly as the set without them (the same losses
#    to the bit: the held-out rows are out of the shuffle), and its
#    val_accuracy equals its test_accuracy (the same images);
#  - the last validation batch is padded (200 = 3 x 64 + 8 with --eval-batch
#    64): the padding rows count nowhere (val accuracy and loss equal one
#    batch of 200's, the loss to 1e-5);
#  - without --holdout the epoch lines keep their old keys only;
#  - the per-model AdamW peak: resnet20 2e-3 (chosen on --holdout 10000,
#    stop 35), mlp, cnn, resnet18 1e-3; SGD 0.05;
#  - a resume with another hold-out (or none) is an error naming both;
#  - bad values are usage errors naming the value.
set -u
build="${1:?usage: holdout_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad

# $tmp/with: 1000 training images + the 200 test images appended; $tmp/without: the 1000 only
/usr/bin/python3 - /usr/share/datasets/fashion-mnist "$tmp" <<'PY'
import gzip, os, struct, sys
src, tmp = sys.argv[1], sys.argv[2]
for d in ("with", "without"):
    os.makedirs(f"{tmp}/{d}")
for kind, hdr, row in (("images-idx3-ubyte", 16, 784), ("labels-idx1-ubyte", 8, 1)):
    train = gzip.open(f"{src}/train-{kind}.gz").read()
    test = gzip.open(f"{src}/t10k-{kind}.gz").read()
    def idx(rows):  # the IDX header with the count of rows, then the rows
        head = bytearray(train[:hdr])
        struct.pack_into(">I", head, 4, len(rows) // row)
        return bytes(head) + rows
    train1000, test200 = train[hdr:hdr + 1000 * row], test[hdr:hdr + 200 * row]
    for d, rows in (("with", train1000 + test200), ("without", train1000)):
        open(f"{tmp}/{d}/train-{kind}", "wb").write(idx(rows))
        open(f"{tmp}/{d}/t10k-{kind}", "wb").write(idx(test200))
PY

run() { # run NAME ARGS...: MLP, 1 epoch of 7 steps, JSON log in $tmp/NAME.json
  local name="$1" rc=0
  shift
  TESSEL_NUM_THREADS=2 "$tessel" train --model mlp --epochs 1 --log-json "$tmp/$name.json" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train $* exits 0"; else bad "train $* exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}
run held --data-dir "$tmp/with" --holdout 200 --eval-batch 64
run plain --data-dir "$tmp/without" --eval-batch 64
run whole --data-dir "$tmp/with" --holdout 200 --eval-batch 200
if grep -q "(1000 train, 200 held out, 200 test)" "$tmp/held.out"; then ok "header: 1000 train, 200 held out"; else
  bad "header: $(head -1 "$tmp/held.out")"; fi
if grep -q "val accuracy [0-9.]*% loss [0-9.]* " "$tmp/held.out"; then ok "epoch line shows the val accuracy"; else
  bad "epoch line: $(grep 'epoch 1 done' "$tmp/held.out")"; fi
if /usr/bin/python3 - "$tmp" <<'PY'
import json, math, sys
def rows(name):
    return [json.loads(line) for line in open(f"{sys.argv[1]}/{name}.json")]
held, plain, whole = rows("held"), rows("plain"), rows("whole")
steps = lambda rs: [(r["step"], r["loss"]) for r in rs if "step" in r]
epoch = lambda rs: [r for r in rs if "epoch" in r]
assert len(steps(held)) == 7 and steps(held) == steps(plain), f"losses differ: {steps(held)} vs {steps(plain)}"
(h,), (p,), (w,) = epoch(held), epoch(plain), epoch(whole)
assert set(p) == {"epoch", "test_accuracy"}, f"without --holdout: {p}"
assert set(h) == {"epoch", "test_accuracy", "val_accuracy", "val_loss"}, f"with --holdout: {h}"
assert h["val_accuracy"] == h["test_accuracy"] == p["test_accuracy"], f"{h} vs {p}"
assert 0 < h["val_loss"] < 10 and math.isfinite(h["val_loss"]), h
assert w["val_accuracy"] == h["val_accuracy"] and abs(w["val_loss"] - h["val_loss"]) <= 1e-5 * h["val_loss"], \
    f"padded last batch: {h} vs one batch: {w}"
print(f"7 equal losses; val = test accuracy {h['val_accuracy']}; val loss {h['val_loss']} / {w['val_loss']}")
PY
then ok "held-out rows untrained, val accuracy = test accuracy, padding ignored"; else bad "logs in $tmp"; fi

# ResNet-20's AdamW default chosen on the hold-out (stop 35: 2e-3); the others keep 1e-3, SGD 0.05
header() { # header ARGS...: the run's header line (1 step)
  "$tessel" train --steps 1 --epochs 1 "$@" 2>&1 | grep -m1 "^tessel train:"
}
for m in "resnet20:lr 0.002" "resnet20 --optimizer sgd:lr 0.05" "resnet18:lr 0.001" "cnn:lr 0.001"; do
  args=${m%%:*} want=${m#*:}
  if header --model $args --dataset synthetic --batch 2 --eval-batch 1000 | grep -q " $want "; then
    ok "--model $args: $want by default"; else bad "--model $args: $(header --model $args --dataset synthetic --batch 2)"; fi
done
if header --model mlp --data-dir "$tmp/with" | grep -q "adamw lr 0.001 "; then ok "--model mlp: lr 0.001 by default"
else bad "--model mlp: $(header --model mlp --data-dir "$tmp/with")"; fi

# the hold-out is part of what a resume must keep: other rows train otherwise
if run saved --data-dir "$tmp/with" --holdout 200 --steps 4 --save-dir "$tmp/ck" --save-every 2; then
  for other in "--holdout 100:holdout 200 (saved) -> 100 (now)" ":holdout 200 (saved) -> 0 (now)"; do
    rc=0
    TESSEL_NUM_THREADS=2 "$tessel" train --model mlp --epochs 1 --data-dir "$tmp/with" --steps 4 ${other%%:*} \
      --resume "$tmp/ck/step-00000002" >"$tmp/r.out" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] && grep -q -- "${other#*:}" "$tmp/r.out"; then ok "resume ${other%%:*}: ${other#*:}"; else
      bad "resume ${other%%:*} (exit $rc): $(tail -2 "$tmp/r.out")"; fi
  done
fi

expect_usage_error() { # expect_usage_error PATTERN ARGS...: exit 2, PATTERN in stderr
  local pat="$1" rc=0
  shift
  "$tessel" train "$@" >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$pat" "$tmp/e.err"; then ok "train $* -> exit 2: $(head -1 "$tmp/e.err")"; else
    bad "train $* (exit $rc): $(head -2 "$tmp/e.err") (expected exit 2 and '$pat')"; fi
}
expect_usage_error "--holdout 1100: the training set in '$tmp/with' has 1200 samples; holding out more than 1072" \
  --model mlp --data-dir "$tmp/with" --holdout 1100 --steps 1
expect_usage_error "--holdout: expected a non-negative integer, got '-5'" --holdout -5
expect_usage_error "--holdout 10: a hold-out split is for --dataset fashion-mnist and cifar10, not synthetic" \
  --model cnn --dataset synthetic --holdout 10 --steps 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
