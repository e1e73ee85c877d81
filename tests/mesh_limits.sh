#!/usr/bin/env bash
# mesh_limits.sh BUILD_DIR — one device limit everywhere and an early error
# for a mesh that cannot fit in memory (issue "Hostile inputs, signals and
# outputs", defect 5): `--mesh data=4097` or `data=100,model=100` used to
# compile for a minute while the memory grew past 6 GB (train accepted 65536
# devices, inspect and TESSEL_CPU_DEVICES 4096). Now train, inspect and
# TESSEL_CPU_DEVICES stop at TS_MAX_DEVICES (4096) at once, and a mesh whose
# devices need more memory than the process may use is refused before
# compiling, with the estimate (checked under `ulimit -v`, so that the answer
# does not depend on the machine; not in sanitizer builds, whose shadow
# memory needs an unlimited address space).
set -u
build="${1:?usage: mesh_limits.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_NUM_THREADS=1

/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/make_idx.py" "$tmp/data" # 256 + 100 random 1x28x28 images

# expect NAME CODE PATTERN CMD...: CMD (at most 30 s) exits CODE with PATTERN in stderr
expect() {
  local name="$1" code="$2" pattern="$3"
  shift 3
  local rc=0
  timeout -k 5 30 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq "$code" ] && { [ -z "$pattern" ] || grep -q -- "$pattern" "$tmp/$name.err"; }; then ok "$name: exit $code, '$pattern'"
  else bad "$name: exit $rc (expected $code and '$pattern'): $(head -c 400 "$tmp/$name.err")"; fi
}
train=("$tessel" train --data-dir "$tmp/data" --batch 256 --eval-batch 100 --steps 1)

expect train4097 2 "at most 4096 devices" "${train[@]}" --mesh data=4097
expect train10000 2 "10000 devices; a mesh has at most 4096" "${train[@]}" --mesh data=100,model=100
expect inspect4097 2 "at most 4096 devices" "$tessel" inspect --mesh data=4097
expect inspect_shape 2 "at most 4096" "$tessel" inspect --mesh 64,64,2 --axis-names data,model,fsdp
expect env4097 1 "TESSEL_CPU_DEVICES='4097' is not a count in \[1, 4096\]" env TESSEL_CPU_DEVICES=4097 "${train[@]}"

if grep -q "TESSEL_SANITIZE:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "skip the memory estimate under ulimit -v: a sanitizer build"
else
  # 1024 devices of the MLP with AdamW need well over 10 GiB; allow 3 GiB
  expect memory 1 "1024 virtual devices need at least [0-9.]* GiB.*available" \
    bash -c 'ulimit -v 3000000 && exec "$@"' _ "${train[@]}" --mesh data=1024
  expect inspect_memory 1 "need at least" bash -c 'ulimit -v 3000000 && exec "$@"' _ "$tessel" inspect --mesh data=1024
  # a small mesh under the same limit still trains
  expect small 0 "" bash -c 'ulimit -v 3000000 && exec "$@"' _ "${train[@]}" --mesh data=2
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
