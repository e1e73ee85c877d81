#!/usr/bin/env bash
# cli_train.sh BUILD_DIR — checks of the `tessel train` command: a short real
# run (30 MLP steps) writes a parseable JSON log whose loss decreases; bad
# flags exit 2 naming the flag; a data dir without the files gives the hint.
set -u
build="${1:?usage: cli_train.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad

# expect_usage_error "pattern" args... : exit code 2 and pattern in stderr.
expect_usage_error() {
  local pattern="$1"
  shift
  local rc=0
  "$tessel" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$pattern" "$tmp/err"; then
    ok "tessel $* -> exit 2, '$pattern'"
  else
    bad "tessel $* -> exit $rc, stderr: $(cat "$tmp/err") (expected exit 2 and '$pattern')"
  fi
}

# ---- help and version ----
if "$tessel" --help | grep -q "train"; then ok "tessel --help"; else bad "tessel --help"; fi
if "$tessel" train --help | grep -q -- "--lr-schedule"; then ok "tessel train --help"; else bad "tessel train --help"; fi
if "$tessel" version | grep -q "^tessel [0-9]"; then ok "tessel version"; else bad "tessel version"; fi

# ---- a short real run ----
rc=0
TESSEL_NUM_THREADS=2 "$tessel" train --model mlp --steps 30 --epochs 1 --log-json "$tmp/log.json" \
  >"$tmp/train.out" 2>"$tmp/train.err" || rc=$?
if [ "$rc" -eq 0 ]; then ok "train --steps 30 exits 0"; else bad "train --steps 30 exit $rc: $(cat "$tmp/train.err")"; fi
if /usr/bin/python3 - "$tmp/log.json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in rows if "step" in r]
evals = [r for r in rows if "epoch" in r]
assert [r["step"] for r in steps] == list(range(1, 31)), f"steps {[r['step'] for r in steps]}"
first, last = sum(r["loss"] for r in steps[:5]) / 5, sum(r["loss"] for r in steps[-5:]) / 5
assert last < first, f"loss did not decrease: first 5 steps {first:.4f}, last 5 {last:.4f}"
assert len(evals) == 1 and 0.0 <= evals[0]["test_accuracy"] <= 1.0, f"evaluations {evals}"
print(f"loss {first:.4f} -> {last:.4f}, test accuracy {evals[0]['test_accuracy']:.4f}")
PY
then ok "JSON log parses, loss decreases"; else bad "JSON log ($tmp/log.json)"; fi

# ---- bad flags: exit 2, flag named ----
expect_usage_error "--batch: expected a positive integer, got 'abc'" train --batch abc
expect_usage_error "--batch" train --batch 0
expect_usage_error "--epochs" train --epochs -1
expect_usage_error "--lr" train --lr nope
expect_usage_error "unknown model 'resnet' (valid: mlp, cnn, resnet20, resnet18, resnet50, gpt)" train --model resnet
expect_usage_error "--optimizer" train --optimizer lbfgs
expect_usage_error "--dataset" train --dataset cifar10
expect_usage_error "--seed: missing value" train --seed
expect_usage_error "unknown flag '--frobnicate'" train --frobnicate 3
expect_usage_error "unknown command 'fly'" fly

# ---- missing data: the loader's message and the hint ----
mkdir -p "$tmp/empty"
rc=0
"$tessel" train --data-dir "$tmp/empty" --steps 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 0 ] && grep -q "dataset-fashion-mnist" "$tmp/err" && grep -q -- "--data-dir" "$tmp/err" \
   && grep -q "$tmp/empty" "$tmp/err"; then
  ok "missing data dir -> hint"
else
  bad "missing data dir -> exit $rc, stderr: $(cat "$tmp/err")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
