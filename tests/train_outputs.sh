#!/usr/bin/env bash
# train_outputs.sh BUILD_DIR — the files `tessel train` writes (--log-json,
# --metrics, --trace, TESSEL_TRACE) under hostile paths (issue "Hostile
# inputs, signals and outputs", defects 1-3):
#  1. a character device or FIFO is written in place, never renamed over
#     (as root a rename turned /dev/null into a regular file);
#  2. a bad path (missing directory, a directory) is a usage error before the
#     data is read; a write error (ENOSPC) on any output or stdout is exit 1;
#  3. a run that fails before its first step leaves the previous files
#     untouched; the same file for two outputs, or a dataset file as an
#     output, is refused.
# Runs as root in CI: device nodes and FIFOs are made here (mknod, mkfifo) in
# a temporary directory; nothing under /dev is written. A small IDX dataset
# made here keeps every run short.
set -u
build="${1:?usage: train_outputs.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT # background runs too
export TESSEL_NUM_THREADS=1
unset TESSEL_TRACE

/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/make_idx.py" "$tmp/data" # 256 + 100 random 1x28x28 images
short=(train --data-dir "$tmp/data" --batch 32 --steps 3 --eval-batch 100)

# run NAME ARGS...: tessel ARGS, stdout/stderr in $tmp/NAME.{out,err}, exit code in $rc
run() {
  local name="$1"
  shift
  rc=0
  "$tessel" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}
# expect NAME CODE PATTERN: the last run exited CODE with PATTERN in its stderr
expect() {
  if [ "$rc" -eq "$2" ] && grep -q -- "$3" "$tmp/$1.err"; then ok "$1: exit $2, '$3'"
  else bad "$1: exit $rc (expected $2 and '$3'): $(head -c 600 "$tmp/$1.err")"; fi
}
json_ok() { /usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1" 2>/dev/null; }

if ! mknod "$tmp/null" c 1 3 2>/dev/null; then
  bad "mknod needs root (CAP_MKNOD); the device-node checks cannot run"
  echo "$passed passed, $failed failed"
  exit 1
fi
mknod "$tmp/null2" c 1 3
mknod "$tmp/full" c 1 7 # what /dev/full is: every write fails with ENOSPC

# ---- 1. special files are written in place ----
run special "${short[@]}" --metrics "$tmp/null" --trace "$tmp/null"
if [ "$rc" -eq 0 ] && [ -c "$tmp/null" ]; then ok "--metrics/--trace on a character device: exit 0, still a device"
else bad "--metrics/--trace on a device node: exit $rc, now: $(ls -l "$tmp/null") $(cat "$tmp/special.err")"; fi
if grep -q "character device: written in place" "$tmp/special.out"; then ok "says the device was written in place"
else bad "no 'written in place' in: $(tail -3 "$tmp/special.out")"; fi
rc=0
TESSEL_TRACE="$tmp/null2" "$tessel" "${short[@]}" >"$tmp/env.out" 2>"$tmp/env.err" || rc=$?
if [ "$rc" -eq 0 ] && [ -c "$tmp/null2" ]; then ok "TESSEL_TRACE on a character device: still a device"
else bad "TESSEL_TRACE on a device node: exit $rc, now: $(ls -l "$tmp/null2")"; fi
mkfifo "$tmp/fifo"
timeout 30 cat "$tmp/fifo" >"$tmp/fifo.read" &
reader=$!
run fifo "${short[@]}" --metrics "$tmp/fifo"
wait "$reader"
if [ "$rc" -eq 0 ] && [ -p "$tmp/fifo" ] && json_ok "$tmp/fifo.read"; then
  ok "--metrics on a FIFO: still a FIFO, the reader got the JSON"
else bad "--metrics on a FIFO: exit $rc, $(ls -l "$tmp/fifo"), read $(head -c 200 "$tmp/fifo.read")"; fi

# ---- 2. paths checked before training; write errors are failures ----
run missing "${short[@]}" --metrics "$tmp/missing/m.json"
expect missing 2 "directory '$tmp/missing'"
if ! grep -q "^epoch\|^tessel train: mlp" "$tmp/missing.out"; then ok "missing directory: refused before training"
else bad "missing directory: trained first: $(head -3 "$tmp/missing.out")"; fi
run isdir "${short[@]}" --trace "$tmp"
expect isdir 2 "is a directory"
rc=0
TESSEL_TRACE="$tmp/missing/t.json" "$tessel" "${short[@]}" >"$tmp/envmiss.out" 2>"$tmp/envmiss.err" || rc=$?
expect envmiss 2 "TESSEL_TRACE"
run logdir "${short[@]}" --log-json "$tmp/missing/log.jsonl"
expect logdir 2 "--log-json"
for flag in --metrics --trace --log-json; do
  run "full${flag#--}" "${short[@]}" "$flag" "$tmp/full"
  expect "full${flag#--}" 1 "No space left on device"
done
rc=0
"$tessel" "${short[@]}" >"$tmp/full" 2>"$tmp/stdout.err" || rc=$?
expect stdout 1 "stdout"

# ---- 3. a failed run keeps the previous files; conflicting outputs refused ----
for f in keep.jsonl keep.m keep.t keep.env; do echo "previous run: $f" >"$tmp/$f"; done
mkdir "$tmp/nodata"
rc=0
TESSEL_TRACE="$tmp/keep.env" "$tessel" train --data-dir "$tmp/nodata" --steps 3 --log-json "$tmp/keep.jsonl" \
  --metrics "$tmp/keep.m" --trace "$tmp/keep.t" >"$tmp/keep.out" 2>"$tmp/keep.err" || rc=$?
kept=0
for f in keep.jsonl keep.m keep.t keep.env; do grep -qx "previous run: $f" "$tmp/$f" && kept=$((kept + 1)); done
if [ "$rc" -eq 1 ] && [ "$kept" -eq 4 ]; then ok "a run failing before its first step leaves the 4 old outputs"
else bad "failed run: exit $rc, $kept of 4 old outputs kept: $(head -c 100 "$tmp/keep.jsonl")"; fi
run same "${short[@]}" --log-json "$tmp/a.json" --metrics "$tmp/./a.json"
expect same 2 "name the same file"
echo old >"$tmp/b.json"
run same2 "${short[@]}" --metrics "$tmp/b.json" --trace "$tmp/b.json"
expect same2 2 "name the same file"
sum_before=$(md5sum <"$tmp/data/train-labels-idx1-ubyte")
run dataset "${short[@]}" --metrics "$tmp/data/train-labels-idx1-ubyte"
expect dataset 2 "file of the dataset"
if [ "$(md5sum <"$tmp/data/train-labels-idx1-ubyte")" = "$sum_before" ]; then ok "the dataset file is unchanged"
else bad "the dataset file was overwritten"; fi
run good "${short[@]}" --log-json "$tmp/keep.jsonl" --metrics "$tmp/keep.m" --trace "$tmp/keep.t"
if [ "$rc" -eq 0 ] && [ "$(grep -c '"step"' "$tmp/keep.jsonl")" -eq 3 ] && json_ok "$tmp/keep.m" && json_ok "$tmp/keep.t"; then
  ok "a run that trains replaces the old outputs"
else bad "good run: exit $rc: $(cat "$tmp/good.err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
