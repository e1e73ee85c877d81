#!/usr/bin/env bash
# ckpt_train.sh BUILD_DIR — checkpoints through `tessel train` and `tessel ckpt`:
#  - --save-dir/--save-every write step directories and `latest`; --keep prunes;
#  - --resume from a middle checkpoint logs exactly (bit for bit) the losses of
#    the uninterrupted run after that step: MLP (AdamW) mid-epoch and at an
#    epoch boundary, CNN (dropout, SGD);
#  - a different mesh may resume (data=2 -> one device, -> fsdp=2: within 1e-4);
#    the same mesh resumes exactly;
#  - a run that differs (batch, optimizer) is an error listing what differs;
#  - a corrupted checkpoint is an error naming the file and the tensor;
#  - `tessel ckpt inspect` verifies; `export` + --init-from starts from the weights;
#  - under mpirun -n 2 each process writes its file; one process resumes exactly.
set -u
build="${1:?usage: ckpt_train.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
small_test_set # $fm: the training set, 1000 test images (the losses are checked, not the accuracy)
export TESSEL_NUM_THREADS=2 OMP_WAIT_POLICY=passive
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
common=(--epochs 1 --eval-batch 5000 --data-dir "$fm")

train() { # train LOG ARGS...: a run whose output goes to LOG.out
  local log="$1"
  shift
  "$tessel" train "${common[@]}" --log-json "$tmp/$log.jsonl" "$@" >"$tmp/$log.out" 2>&1
}
# same_losses A B FIRST LAST [TOL]: steps FIRST..LAST of logs A and B agree (exactly without TOL)
same_losses() {
  python3 - "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$3" "$4" "${5:-0}" <<'PY'
import json, sys
a, b, first, last, tol = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def losses(p):
    return {d["step"]: d["loss"] for d in map(json.loads, open(p)) if "step" in d}
la, lb = losses(a), losses(b)
for s in range(first, last + 1):
    if s not in la or s not in lb:
        sys.exit(f"step {s} missing")
    x, y = la[s], lb[s]
    if (tol == 0 and x != y) or abs(x - y) > tol * max(abs(x), 1e-30):
        sys.exit(f"step {s}: {x!r} vs {y!r}")
PY
}

# 1. save every 4 steps; keep 2
if train a --steps 12 --save-dir "$tmp/A" --save-every 4 &&
   [ -d "$tmp/A/step-00000004" ] && [ -d "$tmp/A/step-00000012" ] && [ "$(cat "$tmp/A/latest")" = step-00000012 ]; then
  ok "--save-dir/--save-every: steps 4, 8, 12 and latest"
else bad "--save-every (see $tmp/a.out)"; cat "$tmp/a.out"; fi
if train k --steps 12 --save-dir "$tmp/K" --save-every 4 --keep 2 &&
   [ ! -e "$tmp/K/step-00000004" ] && [ -d "$tmp/K/step-00000008" ] && [ -d "$tmp/K/step-00000012" ]; then
  ok "--keep 2 prunes the oldest"
else bad "--keep"; ls "$tmp/K"; fi

# 2. exact resume (MLP, AdamW): steps 5..12 bit-identical
if train r --steps 12 --resume "$tmp/A/step-00000004" && grep -q "resume: step 4 of 12" "$tmp/r.out" &&
   same_losses a r 5 12; then
  ok "--resume from step 4 logs the uninterrupted run's losses exactly"
else bad "exact resume (MLP)"; cat "$tmp/r.out"; fi

# 2b. at an epoch boundary (batch 6000: 10 steps an epoch): the next epoch's order and evaluation
if train e --batch 6000 --epochs 2 --steps 12 --save-dir "$tmp/E" --save-every 10 &&
   train er --batch 6000 --epochs 2 --steps 12 --resume "$tmp/E/step-00000010" && same_losses e er 11 12 &&
   grep -q "epoch 2 done" "$tmp/er.out" && ! grep -q "epoch 1 done" "$tmp/er.out"; then
  ok "--resume at an epoch boundary continues with the next epoch exactly"
else bad "resume at an epoch boundary"; cat "$tmp/er.out"; fi

# 3. CNN with dropout and SGD: exact too
if train c --model cnn --optimizer sgd --batch 32 --steps 6 --save-dir "$tmp/C" --save-every 3 &&
   train cr --model cnn --optimizer sgd --batch 32 --steps 6 --resume "$tmp/C/step-00000003" && same_losses c cr 4 6; then
  ok "--resume of the CNN (dropout, SGD momentum) is exact"
else bad "exact resume (CNN)"; cat "$tmp/cr.out"; fi

# 4. another mesh: data=2 saved; same mesh exact, one device and fsdp=2 within 1e-4
if train m --steps 10 --mesh data=2 --save-dir "$tmp/M" --save-every 5 &&
   train m1 --steps 10 --mesh data=2 --resume "$tmp/M/step-00000005" && same_losses m m1 6 10 &&
   train m2 --steps 10 --resume "$tmp/M/step-00000005" && same_losses m m2 6 10 1e-4 &&
   train m3 --steps 10 --mesh fsdp=2 --resume "$tmp/M/step-00000005" && same_losses m m3 6 10 1e-4; then
  ok "resume on another mesh (data=2 -> 1 device, fsdp=2) within 1e-4, the same mesh exactly"
else bad "resume across meshes"; tail -3 "$tmp"/m*.out; fi

# 5. a different run is an error listing the differences
if ! train d --steps 12 --batch 64 --optimizer sgd --resume "$tmp/A" &&
   grep -q "batch 128 (saved) -> 64 (now)" "$tmp/d.out" && grep -q "optimizer adamw (saved) -> sgd (now)" "$tmp/d.out"; then
  ok "a different batch/optimizer is an error listing what differs"
else bad "different run"; cat "$tmp/d.out"; fi

# 6. a corrupted checkpoint: the error names the file and the tensor
cp -r "$tmp/A" "$tmp/Z"
python3 - "$tmp/Z/step-00000008/shard-00000-of-00001.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x01
open(p, "wb").write(bytes(b))
PY
if ! train z --steps 12 --resume "$tmp/Z/step-00000008" && grep -q "shard-00000-of-00001.safetensors: checksum mismatch in tensor" "$tmp/z.out" &&
   ! "$tessel" ckpt inspect "$tmp/Z/step-00000008" >"$tmp/zi.out" 2>&1 && grep -q "checksum mismatch" "$tmp/zi.out"; then
  ok "a flipped byte: resume and inspect fail naming file and tensor"
else bad "corruption"; cat "$tmp/z.out" "$tmp/zi.out"; fi

# 7. inspect, export, --init-from
if "$tessel" ckpt inspect "$tmp/A" >"$tmp/i.out" 2>&1 && grep -q "verified" "$tmp/i.out" &&
   grep -q "fc1.weight.exp_avg *optimizer *f32\[512,784\]" "$tmp/i.out" &&
   "$tessel" ckpt export "$tmp/A" --out "$tmp/mlp.safetensors" >/dev/null &&
   train f --steps 1 --lr 1e-30 --init-from "$tmp/mlp.safetensors" && train g --steps 1 --lr 1e-30 &&
   python3 - "$tmp/a.jsonl" "$tmp/f.jsonl" "$tmp/g.jsonl" <<'PY'
import json, sys
last = lambda p: [d["loss"] for d in map(json.loads, open(p)) if "step" in d]
a, f, g = last(sys.argv[1]), last(sys.argv[2]), last(sys.argv[3])
# from the trained weights the first loss is near the end of run a, far below a fresh start
sys.exit(0 if f[0] < 0.8 * g[0] and abs(f[0] - a[-1]) < 0.5 else 1)
PY
then
  ok "ckpt inspect verifies; export + --init-from starts from the trained weights"
else bad "inspect/export/init-from"; cat "$tmp/i.out" "$tmp/f.out"; fi
if ! train w --model cnn --steps 1 --init-from "$tmp/mlp.safetensors" && grep -q "conv1.weight: missing" "$tmp/w.out"; then
  ok "--init-from a file of another model lists the differences"
else bad "--init-from mismatch"; cat "$tmp/w.out"; fi

# 8. two processes save (one file each); one process resumes exactly
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n 2 --oversubscribe --bind-to none "$tessel" train "${common[@]}" \
       --mesh data=2 --steps 8 --save-dir "$tmp/P" --save-every 4 --log-json "$tmp/p.jsonl" >"$tmp/p.out" 2>&1 &&
     [ -f "$tmp/P/step-00000004/shard-00001-of-00002.safetensors" ] &&
     train p1 --steps 8 --mesh data=2 --resume "$tmp/P/step-00000004" && same_losses p p1 5 8; then
    ok "mpirun -n 2 saves a file per process; one process with data=2 resumes exactly"
  else bad "MPI save/resume"; cat "$tmp/p.out" "$tmp/p1.out"; fi
else
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
