#!/usr/bin/env bash
# ckpt_async_train.sh BUILD_DIR — `tessel train --save-dir` saves in the
# background (tessel/ckpt.h ts_ckpt_saver):
#  - every --save-every checkpoint and the final one are written and complete
#    (`latest`, verified by `tessel ckpt inspect`), each announced with the
#    time training waited for its snapshot;
#  - the losses are those of a run without checkpoints (bit for bit);
#  - an error of a background save (a --save-dir that cannot be created)
#    ends the run with exit 1 and the error, at a later step: never lost.
set -u
build="${1:?usage: ckpt_async_train.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_NUM_THREADS=2 OMP_WAIT_POLICY=passive
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
common=(--epochs 1 --eval-batch 5000 --steps 12)

"$tessel" train "${common[@]}" --log-json "$tmp/plain.jsonl" >"$tmp/plain.out" 2>&1 || bad "run without checkpoints failed"
rc=0
"$tessel" train "${common[@]}" --log-json "$tmp/a.jsonl" --save-dir "$tmp/A" --save-every 4 >"$tmp/a.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/A/latest")" = step-00000012 ] && [ -d "$tmp/A/step-00000004" ] &&
   [ -d "$tmp/A/step-00000008" ] && [ "$(grep -c 'training waited' "$tmp/a.out")" -eq 3 ] &&
   "$tessel" ckpt inspect "$tmp/A" >"$tmp/inspect.out" 2>&1; then
  ok "steps 4, 8, 12 saved in the background, announced, the last one verified"
else bad "background saves (exit $rc): $(tail -5 "$tmp/a.out")"; fi
if cmp -s <(grep '"step"' "$tmp/plain.jsonl" | sed 's/,"step_ms".*//') <(grep '"step"' "$tmp/a.jsonl" | sed 's/,"step_ms".*//'); then
  ok "losses equal a run without checkpoints"
else bad "losses differ from a run without checkpoints"; fi

: >"$tmp/a-file"
rc=0
"$tessel" train "${common[@]}" --save-dir "$tmp/a-file/ckpt" --save-every 4 >"$tmp/e.out" 2>"$tmp/e.err" || rc=$?
if [ "$rc" -eq 1 ] && grep -q "a-file" "$tmp/e.err" && ! grep -q "^done:" "$tmp/e.out"; then
  ok "a failed background save ends the run: exit 1, $(head -c 160 "$tmp/e.err")"
else bad "failed background save: exit $rc, $(head -c 400 "$tmp/e.err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
