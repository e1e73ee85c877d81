#!/usr/bin/env bash
# spmd_train.sh BUILD_DIR — `tessel train --mesh` computes what one device
# computes: the MLP trained for 50 steps with --mesh data=8 (data parallel)
# and --mesh data=4,model=2 (Megatron MLP on "model") logs the same loss
# curve as without a mesh. Tolerance: |loss - loss_1| <= 1e-4 * max(1, loss_1)
# at every step (f32; the partitioned sums add in another order).
set -u
build="${1:?usage: spmd_train.sh BUILD_DIR}"
tessel="$build/tessel"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

run() { # run NAME ARGS...: 50 MLP steps, JSON log in $tmp/NAME.json
  local name="$1"
  shift
  local rc=0
  TESSEL_NUM_THREADS=2 "$tessel" train --model mlp --steps 50 --epochs 1 --eval-batch 2000 \
    --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train $* exits 0"; else bad "train $* exit $rc: $(tail -3 "$tmp/$name.err")"; fi
}

run one
run dp --mesh data=8
run mp --mesh data=4,model=2

for name in dp mp; do
  if /usr/bin/python3 - "$tmp/one.json" "$tmp/$name.json" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 50 and len(b) == 50, f"{len(a)} and {len(b)} steps logged"
worst = max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b))
print(f"worst relative loss difference {worst:.3g}")
assert worst <= 1e-4, f"loss curves differ by {worst:.3g}"
PY
  then ok "$name loss curve equals 1 device"; else bad "$name loss curve differs from 1 device"; fi
done

# errors name the flag
rc=0
"$tessel" train --mesh data --steps 1 >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 0 ] && grep -q -- "--mesh" "$tmp/err"; then ok "bad --mesh is refused"; else bad "--mesh data: exit $rc, $(cat "$tmp/err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
