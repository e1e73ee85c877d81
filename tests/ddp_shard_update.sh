#!/usr/bin/env bash
# ddp_shard_update.sh BUILD_DIR — `tessel train --parallel ddp` (the
# weights' update sharded over the replicas by default: gradients
# reduce-scattered, ZeroRedundancyOptimizer) under mpirun -n 2 logs exactly
# (bit for bit) the losses of --parallel ddp --replicated-update (MLP, AdamW,
# 12 steps) and sends fewer bytes between the processes (NetBytesSent: a
# reduce-scatter instead of an all-reduce for the sharded weights' gradients,
# so no more than the replicated update's all-reduces); saved at step 6 and
# resumed (with --shard-update, still accepted), steps 7..12 are again the same
# (the sharded optimizer state goes through the checkpoint whole), and a
# sharded checkpoint resumes under --replicated-update too; --check-replicas
# holds; --shard-update / --replicated-update without ddp, or together, are
# refused. (tests/mpi_ddp_zero.c checks the library's numbers on the CNN and
# MLP, 2 and 3 processes, 30 steps.)
set -u
build="${1:?usage: ddp_shard_update.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
small_test_set # $fm: the training set, 1000 test images (the losses are checked, not the accuracy)
need_mpirun # fails the test without mpirun; OpenMPI's settings for root and ASan
run() { # run NAME ARGS...: 2 processes, MLP, JSON log in $tmp/NAME.json
  local name="$1"
  shift
  local rc=0
  TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n 2 --oversubscribe --bind-to none "$tessel" train --model mlp \
    --parallel ddp --epochs 1 --eval-batch 5000 --data-dir "$fm" --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    rc=$?
  if [ "$rc" -eq 0 ]; then ok "$name: train --parallel ddp $* exits 0"; else bad "$name: exit $rc: $(tail -5 "$tmp/$name.err")"; fi
}
same() { # same A B FIRST LAST: steps FIRST..LAST of the two logs are identical
  /usr/bin/python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "$4" <<'PY'
import json, sys
def losses(p):
    return {d["step"]: d["loss"] for d in map(json.loads, open(p)) if "step" in d}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
for s in range(int(sys.argv[3]), int(sys.argv[4]) + 1):
    if s not in a or s not in b or a[s] != b[s]:
        sys.exit(f"step {s}: {a.get(s)!r} vs {b.get(s)!r}")
PY
}
run rep --steps 12 --replicated-update --metrics "$tmp/rep.metrics"
run zero --steps 12 --check-replicas 4 --save-dir "$tmp/Z" --save-every 6
run zb --steps 12 --metrics "$tmp/zero.metrics" # as rep: no checkpoint (it gathers the sharded state)
if same rep zero 1 12; then ok "the default (sharded) update logs the replicated update's 12 losses exactly"
else bad "the sharded update differs from --replicated-update"; fi
if same rep zb 1 12; then ok "... also without checkpoints"; else bad "zb differs from rep"; fi
# bytes between the processes: the sharded update must not send more
if /usr/bin/python3 - "$tmp/rep.metrics" "$tmp/zero.metrics" >"$tmp/bytes.out" 2>&1 <<'PY'
import json, sys
def sent(p):
    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "NetBytesSent":
                    return x if isinstance(x, (int, float)) else x.get("value", x.get("sum", x.get("total")))
                r = walk(x)
                if r is not None: return r
        elif isinstance(v, list):
            for x in v:
                r = walk(x)
                if r is not None: return r
    return walk(json.load(open(p)))
a, b = sent(sys.argv[1]), sent(sys.argv[2])
print(f"NetBytesSent replicated {a}, sharded {b}")
sys.exit(0 if a and b and b <= a * 1.02 else 1)
PY
then ok "$(cat "$tmp/bytes.out"): no more than the replicated update"
else bad "bytes: $(cat "$tmp/bytes.out")"; fi
run resumed --steps 12 --shard-update --resume "$tmp/Z/step-00000006"
if grep -q "resume: step 6 of 12" "$tmp/resumed.out" && same rep resumed 7 12; then
  ok "--shard-update resumed from step 6 logs steps 7..12 exactly"
else bad "resume with --shard-update: $(grep -i resume "$tmp/resumed.out" | head -2)"; fi
run resumed_rep --steps 12 --replicated-update --resume "$tmp/Z/step-00000006"
if same rep resumed_rep 7 12; then ok "the sharded checkpoint resumed with --replicated-update logs steps 7..12 exactly"
else bad "sharded checkpoint resumed with --replicated-update differs"; fi
for flag in --shard-update --replicated-update; do
  rc=0
  "$tessel" train --steps 2 $flag >"$tmp/bad.out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && grep -q -- "$flag is for --parallel ddp" "$tmp/bad.out"; then
    ok "$flag without --parallel ddp is refused"
  else bad "$flag without ddp: exit $rc: $(head -2 "$tmp/bad.out")"; fi
done
rc=0
"$tessel" train --steps 2 --parallel ddp --shard-update --no-shard-update >"$tmp/bad.out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] && grep -q -- "exclude each other" "$tmp/bad.out"; then ok "--shard-update with --no-shard-update is refused"
else bad "--shard-update --no-shard-update: exit $rc: $(head -2 "$tmp/bad.out")"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
