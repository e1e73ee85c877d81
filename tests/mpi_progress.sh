#!/usr/bin/env bash
# mpi_progress.sh BUILD_DIR — `tessel train` output redirected to a file holds
# no terminal escape codes (ESC, \x1b): alone, and under `mpirun -n 2` with
# every rank printing (OpenMPI hands each rank a pseudo-terminal as stdout
# whatever mpirun's own stdout is, so the progress display must not trust
# isatty there); each rank's epoch progress is a plain line.
set -u
build="${1:?usage: mpi_progress.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
# as root (containers, CI) OpenMPI wants these; harmless otherwise
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TESSEL_NUM_THREADS=1
# sanitizer builds: OpenMPI's own allocations at exit are not ours to report
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
args=(train --model mlp --steps 5 --epochs 1 --eval-batch 2500)

# no_esc NAME FILE...: none of the files holds an ESC byte
no_esc() {
  local name="$1"
  shift
  if grep -q $'\x1b' "$@"; then
    bad "$name: ESC byte in the output: $(grep -h $'\x1b' "$@" | head -2 | cat -v)"
  else
    ok "$name: no ESC byte"
  fi
}

rc=0
"$tessel" "${args[@]}" >"$tmp/one.out" 2>"$tmp/one.err" || rc=$?
if [ "$rc" -eq 0 ]; then ok "one process exits 0"; else bad "one process: exit $rc: $(tail -3 "$tmp/one.err")"; fi
no_esc "one process, stdout to a file" "$tmp/one.out" "$tmp/one.err"

if ! command -v mpirun >/dev/null; then
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
else
  rc=0
  timeout 120 mpirun -n 2 --oversubscribe --bind-to none "$tessel" "${args[@]}" --all-ranks \
    >"$tmp/mpi.out" 2>"$tmp/mpi.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "mpirun -n 2 exits 0"; else bad "mpirun -n 2: exit $rc: $(tail -3 "$tmp/mpi.err")"; fi
  no_esc "mpirun -n 2 --all-ranks, stdout to a file" "$tmp/mpi.out" "$tmp/mpi.err"
  n=$(grep -c '^epoch 1/1 640/640 (100%)' "$tmp/mpi.out")
  if [ "$n" -eq 2 ]; then ok "each of the 2 ranks prints its epoch as a plain line"
  else bad "expected 2 plain epoch lines, got $n: $(head -8 "$tmp/mpi.out" | cat -v)"; fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
