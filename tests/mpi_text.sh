#!/usr/bin/env bash
# mpi_text.sh BUILD_DIR — under `mpirun -n 2` every process must train on the
# same text: ranks whose --data-file holds different bytes (same size) stop
# before training with an error naming the corpus and both ranks' hashes.
set -u
build="${1:?usage: mpi_text.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
# as root (containers, CI) OpenMPI wants these; harmless otherwise
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TESSEL_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

for r in 0 1; do
  for i in $(seq 1 60); do echo "rank $r line $i: and the evening and the morning were the first day"; done >"$tmp/t$r.txt"
done
if ! command -v mpirun >/dev/null; then
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
else
  rc=0
  # each rank its own file: the path is expanded inside the rank
  TESSEL_TMP="$tmp" TESSEL_BIN="$tessel" timeout 120 mpirun -n 2 --oversubscribe --bind-to none bash -c \
    'exec "$TESSEL_BIN" train --model gpt --data-file "$TESSEL_TMP/t$OMPI_COMM_WORLD_RANK.txt" --steps 1' \
    >"$tmp/mpi.out" 2>"$tmp/mpi.err" || rc=$?
  if [ "$rc" -ne 0 ] && grep -q 'the text corpus (--data-file) differs between processes: rank 0 has "4011 bytes, FNV-1a' "$tmp/mpi.err"; then
    ok "different corpora on the ranks: refused before training"
  else bad "different corpora: exit $rc: $(head -c 600 "$tmp/mpi.err")"; fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
