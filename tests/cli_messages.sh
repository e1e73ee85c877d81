#!/usr/bin/env bash
# cli_messages.sh BUILD_DIR — messages of `tessel train` that were wrong or
# missing (issue "Hostile inputs, signals and outputs", defect 7):
#  - a test set of 28x27 images was reported with the training set's shape
#    ("expected 1x28x28 ... got 1x28x28"): the message shows the real one;
#  - a number above a flag's bound says the bound (--lr 1e7: at most 1e+06;
#    --mesh data=99999: at most 4096 devices), not only "a positive number";
#  - the "install the Debian package" hint comes only when the dataset is
#    missing, not when it is damaged;
#  - a symlink loop is "Too many levels of symbolic links", not "no such file";
#  - threads: --threads and TESSEL_NUM_THREADS follow one rule, a count in
#    [1, 4096] (above: refused, both), more than the cores capped and said so;
#  - --warmup longer than the run and --check-replicas without DDP are errors.
set -u
build="${1:?usage: cli_messages.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_NUM_THREADS=1

# DIR TEST_W: 256 training images of 1x28x28 and 100 test images of 1x28xTEST_W
/usr/bin/python3 - "$tmp" <<'PY'
import os, random, struct, sys
rng = random.Random(1)
def idx(path, magic, dims):
    n = 1
    for x in dims: n *= x
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", x) for x in dims))
        f.write(bytes(rng.randrange(256 if magic == 0x803 else 10) for _ in range(n)))
for name, test_w in (("data", 28), ("narrow", 27)):
    d = os.path.join(sys.argv[1], name)
    os.makedirs(d)
    for split, n, w in (("train", 256, 28), ("t10k", 100, test_w)):
        idx(f"{d}/{split}-images-idx3-ubyte", 0x803, (n, 28, w))
        idx(f"{d}/{split}-labels-idx1-ubyte", 0x801, (n,))
PY
data=(--data-dir "$tmp/data" --batch 32 --eval-batch 100)

# lacks NAME PATTERN: the last run's stderr does not hold PATTERN
lacks() {
  if grep -q -- "$2" "$tmp/$1.err"; then bad "$1: stderr holds '$2': $(cat "$tmp/$1.err")"; else ok "$1: no '$2'"; fi
}

expect shape 1 "the test set in '$tmp/narrow' has 1x28x27 images; fashion-mnist expects 1x28x28" \
  train --data-dir "$tmp/narrow" --steps 1
expect lr 2 "--lr: expected a positive number, at most 1e+06; got '1e7'" train --lr 1e7
expect batch 2 "at most 2147483647" train --batch 99999999999999999999
expect mesh 2 "has 99999 devices; a mesh has at most 4096" train --mesh data=99999

# damaged, not missing: no hint to install the package
mkdir "$tmp/damaged"
cp "$tmp/data"/* "$tmp/damaged/"
printf 'not an IDX file' >"$tmp/damaged/train-images-idx3-ubyte"
expect damaged 1 "bad magic" train --data-dir "$tmp/damaged" --steps 1
lacks damaged "install the Debian package"
expect missing 1 "install the Debian package" train --data-dir "$tmp/nothing-here" --steps 1

# a symlink loop where a dataset file should be
mkdir "$tmp/loop"
cp "$tmp/data"/* "$tmp/loop/"
rm "$tmp/loop/train-images-idx3-ubyte"
ln -s loop-b "$tmp/loop/loop-a"
ln -s loop-a "$tmp/loop/loop-b"
ln -s loop-a "$tmp/loop/train-images-idx3-ubyte"
expect loop 1 "Too many levels of symbolic links" train --data-dir "$tmp/loop" --steps 1
lacks loop "no such file"
lacks loop "install the Debian package"

# threads: one rule for the flag and the variable
expect threads_flag 2 "--threads: expected a positive integer, at most 4096" train --threads 100000
rc=0
TESSEL_NUM_THREADS=100000 "$tessel" train "${data[@]}" --steps 1 >"$tmp/threads_env.out" 2>"$tmp/threads_env.err" || rc=$?
if [ "$rc" -ne 0 ] && grep -q "TESSEL_NUM_THREADS='100000' is not a count in \[1, 4096\]" "$tmp/threads_env.err"; then
  ok "TESSEL_NUM_THREADS=100000: refused, the same bound"
else bad "TESSEL_NUM_THREADS=100000: exit $rc, $(cat "$tmp/threads_env.err")"; fi
expect threads_cap 0 "" train "${data[@]}" --steps 1 --threads 4096
if grep -q "(4096 asked, capped to the cores)" "$tmp/threads_cap.out"; then ok "--threads 4096: the cap is said"
else bad "--threads 4096: $(head -1 "$tmp/threads_cap.out")"; fi
rc=0
TESSEL_NUM_THREADS=4096 "$tessel" train "${data[@]}" --steps 1 >"$tmp/env_cap.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && grep -q "(4096 asked, capped to the cores)" "$tmp/env_cap.out"; then ok "TESSEL_NUM_THREADS=4096: the cap is said"
else bad "TESSEL_NUM_THREADS=4096: exit $rc, $(head -1 "$tmp/env_cap.out")"; fi

expect warmup 2 "--warmup: 50 steps is longer than the run (10 steps)" train "${data[@]}" --steps 10 --warmup 50
expect replicas 2 "--check-replicas compares the replicas of --parallel ddp" train --check-replicas 10

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
