#!/usr/bin/env bash
# comm_inline.sh BUILD_DIR — started collectives run in line on the device
# thread (comm.h comm_start_inline; the default up to 8 MiB in shared memory,
# up to 8 MiB between processes of one host, 64 KiB between hosts) log exactly (bit for bit) the losses of the
# worker path (TESSEL_COMM_INLINE_BYTES=0: every started collective handed
# to the device's collective worker) and of a mix of both (=65536: the small
# ones in line, the large ones on the worker, in order behind each other):
# `tessel train --model mlp` on mesh data=2 and fsdp=2 in one process (the
# trace shows which path ran: "(start)" events only on the worker path),
# and under mpirun -n 2 (also all in line: =1 TiB) with --parallel ddp (the sharded update:
# reduce-scatter, all-gather, all-reduce) and --mesh data=2. 6 steps each.
set -u
build="${1:?usage: comm_inline.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
small_test_set # $fm: the training set, 1000 test images (the losses are checked, not the accuracy)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

run() { # run NAME INLINE_BYTES LAUNCHER... -- ARGS...: a 6-step MLP run, JSON log in $tmp/NAME.json
  local name="$1" bytes="$2" rc=0
  shift 2
  local pre=()
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  if [ "$bytes" = auto ]; then
    env -u TESSEL_COMM_INLINE_BYTES TESSEL_NUM_THREADS=2 timeout -k 5 120 "${pre[@]}" "$tessel" train --model mlp \
      --epochs 1 --steps 6 --eval-batch 5000 --data-dir "$fm" --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  else
    TESSEL_COMM_INLINE_BYTES="$bytes" TESSEL_NUM_THREADS=2 timeout -k 5 120 "${pre[@]}" "$tessel" train --model mlp \
      --epochs 1 --steps 6 --eval-batch 5000 --data-dir "$fm" --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then ok "$name: exits 0"; else bad "$name: exit $rc: $(tail -5 "$tmp/$name.err")"; fi
}
same() { # same A B: the two logs hold the same 6 losses, bit for bit
  if /usr/bin/python3 - "$tmp/$1.json" "$tmp/$2.json" <<'PY'
import json, sys
def losses(p):
    return [d["loss"] for d in map(json.loads, open(p)) if "step" in d]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 6 and a == b, f"{a} vs {b}"
PY
  then ok "$1 and $2 log the same losses"; else bad "$1 and $2 differ"; fi
}
starts() { # starts NAME: how many started ("(start)") collectives the trace holds
  /usr/bin/python3 - "$tmp/$1.trace" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
print(sum(1 for e in ev if "(start)" in str(e.get("name", ""))))
PY
}

for mesh in data=2 fsdp=2; do
  m="${mesh%=*}"
  run "$m-inline" auto -- --mesh "$mesh" --threads 2 --trace "$tmp/$m-inline.trace"
  run "$m-worker" 0 -- --mesh "$mesh" --threads 2 --trace "$tmp/$m-worker.trace"
  run "$m-mixed" 65536 -- --mesh "$mesh" --threads 2
  same "$m-inline" "$m-worker"
  same "$m-inline" "$m-mixed"
  a="$(starts "$m-inline")" b="$(starts "$m-worker")"
  if [ "$a" = 0 ] && [ "${b:-0}" -gt 0 ]; then ok "$mesh: no collective handed to the worker in line, $b on the worker path"
  else bad "$mesh: started collectives in the traces: in line $a, worker $b"; fi
done

if command -v mpirun >/dev/null; then
  mpi=(mpirun -n 2 --oversubscribe --bind-to none -x TESSEL_NUM_THREADS=1)
  run ddp-inline auto "${mpi[@]}" -- --parallel ddp
  run ddp-worker 0 "${mpi[@]}" -x TESSEL_COMM_INLINE_BYTES -- --parallel ddp
  run ddp-all 1099511627776 "${mpi[@]}" -x TESSEL_COMM_INLINE_BYTES -- --parallel ddp
  same ddp-inline ddp-worker
  same ddp-inline ddp-all
  run spmd-inline auto "${mpi[@]}" -- --mesh data=2
  run spmd-worker 0 "${mpi[@]}" -x TESSEL_COMM_INLINE_BYTES -- --mesh data=2
  same spmd-inline spmd-worker
else
  echo "skip the mpirun runs: no mpirun"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
