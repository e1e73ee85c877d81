#!/usr/bin/env bash
# imagefolder_cli.sh BUILD_DIR — `tessel train --dataset imagefolder` on a
# generated tree of JPEG/PNG files (tests/make_imagefolder.py, PIL):
#  - trains and evaluates (resnet20 on 16x16 crops; the val set's last batch
#    padded); --loader-workers 1 and 3 log the same losses;
#  - per-host loading: under mpirun -n 2 (SPMD, the default mesh) and -n 2
#    --parallel ddp, --load local (the default) and --load global log
#    exactly the same losses and test accuracies (evaluation per host too
#    under SPMD), which follow the 1-process curve within 1e-4; only
#    --load local says it loads per host;
#  - a resume mid-epoch (--save-every 3, --resume step 3) continues with
#    exactly the uninterrupted run's losses;
#  - a truncated file is an error naming it; with --skip-bad-files the run
#    finishes and names the skipped file; an empty class folder, a missing
#    val split and train/val classes that differ are errors naming the
#    folder; a --log-json onto an image of the dataset is refused; flags
#    that do not belong together are usage errors.
set -u
build="${1:?usage: imagefolder_cli.sh BUILD_DIR}"
tessel="$build/tessel"
here="$(dirname "${BASH_SOURCE[0]}")"
. "$here/harness.bash" # $tmp, ok, bad, expect, compare
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

data="$tmp/data"
/usr/bin/python3 "$here/make_imagefolder.py" "$data" --classes 3 --train 8 --val 3 --size 24x20 --vary ||
  bad "make_imagefolder.py failed"
# --layout nchw: the configuration this test's 1e-4 check was set on. Its
# 8 AdamW steps of batch norms over 3 images per process on 16x16 crops are
# ill-conditioned: 1 and 2 processes start 2e-7 apart and part by 9e-5 (NCHW,
# seed 1), 7e-4 (NHWC, seed 1), 2e-3 (NCHW, seed 4), 5e-7 (NHWC, seed 4) at
# step 8 (stop 34): which layout passes depends on the seed, not on a defect.
# The layouts' SPMD equivalence is test_resnet_spmd's and layout_cli.sh's. --lr 1e-3 keeps
# these measurements' curves: ResNet-20's default 2e-3 (stop 35) parts them by 1.5e-4 at step 8.
common=(--dataset imagefolder --data-dir "$data" --model resnet20 --image-size 16 --batch 6 --eval-batch 4 --epochs 2
  --layout nchw --lr 1e-3)

run() { # run NAME NP ARGS...: 8 steps (2 epochs of 4), JSON log in $tmp/NAME.json; NP 0: no mpirun
  local name="$1" np="$2"
  shift 2
  local rc=0
  if [ "$np" = 0 ]; then
    TESSEL_NUM_THREADS=1 timeout -k 5 120 "$tessel" train "${common[@]}" --log-json "$tmp/$name.json" "$@" \
      >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  else
    TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n "$np" --oversubscribe --bind-to none \
      "$tessel" train "${common[@]}" --log-json "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then ok "$name: $np processes $* exits 0"; else bad "$name: exit $rc: $(tail -5 "$tmp/$name.err")"; fi
}
same() { # same A B: the logged losses and test accuracies are the same texts
  if [ -s "$tmp/$1.json" ] && diff <(grep -o '"loss":[^,]*\|"test_accuracy":[^}]*' "$tmp/$1.json") \
    <(grep -o '"loss":[^,]*\|"test_accuracy":[^}]*' "$tmp/$2.json") >/dev/null
  then ok "$2 logs exactly $1's losses and accuracies"; else bad "$2's losses or accuracies differ from $1's"; fi
}

run one 0
grep -q "test accuracy" "$tmp/one.out" && grep -q "resnet20 on imagefolder (24 train, 9 test)" "$tmp/one.out" &&
  ok "one: trains and evaluates 24/9 images" || bad "one: $(head -3 "$tmp/one.out")"
run workers3 0 --loader-workers 3
same one workers3

if command -v mpirun >/dev/null; then
  run local2 2
  run global2 2 --load global
  same global2 local2
  grep -q "per-host loading" "$tmp/local2.out" && grep -q "per-host evaluation" "$tmp/local2.out" &&
    ! grep -q "per-host" "$tmp/global2.out" &&
    ok "local2 says it loads and evaluates per host, global2 does not" || bad "local2/global2: per-host lines"
  compare one local2 8 # (-n 3: tests/mpi_imagefolder.c)
  run ddp_local 2 --parallel ddp --load local
  run ddp_global 2 --parallel ddp --load global
  same ddp_global ddp_local
else
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
fi

# resume mid-epoch (4 steps per epoch: step 3 is inside epoch 1)
run saved 0 --save-dir "$tmp/ck" --save-every 3
same one saved
run resumed 0 --resume "$tmp/ck/step-00000003"
if diff <(grep -o '"step":[4-8],"loss":[^,]*' "$tmp/saved.json") <(grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/resumed.json") >/dev/null
then ok "resumed at step 3 logs exactly steps 4..8 of the uninterrupted run"
else bad "resumed losses differ: $(head -3 "$tmp/resumed.json")"; fi

# bad files
cp -r "$data" "$tmp/bad"
f="$tmp/bad/train/class_01/img_0002.jpg"
head -c 300 "$data/train/class_01/img_0002.jpg" >"$f"
expect truncated 1 "class_01/img_0002.jpg: corrupt or truncated JPEG" train "${common[@]/$data/$tmp/bad}" --steps 4
rc=0
TESSEL_NUM_THREADS=1 "$tessel" train "${common[@]/$data/$tmp/bad}" --skip-bad-files >"$tmp/skip.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && grep -q "1 unreadable train file skipped" "$tmp/skip.out" && grep -q "skipped: .*class_01/img_0002.jpg" "$tmp/skip.out"
then ok "--skip-bad-files finishes and names the skipped file"; else bad "--skip-bad-files: exit $rc: $(tail -5 "$tmp/skip.out")"; fi
mkdir "$tmp/bad/train/class_99"
expect empty_class 1 "class_99: class folder without .jpg, .jpeg or .png files" train "${common[@]/$data/$tmp/bad}"
rmdir "$tmp/bad/train/class_99"
mv "$tmp/bad/val" "$tmp/bad/v"
expect no_val 1 "bad/val: cannot open the ImageFolder split" train "${common[@]/$data/$tmp/bad}"
mkdir -p "$tmp/bad/val" && mv "$tmp/bad/v/class_00" "$tmp/bad/v/class_01" "$tmp/bad/val/"
expect classes_differ 1 "they differ at class 2 ('class_02' vs '(none)')" train "${common[@]/$data/$tmp/bad}"
expect log_in_data 2 "is a file of the dataset" train "${common[@]}" --log-json "$data/val/class_00/img_0000.jpg"
expect cnn 2 "trains a resnet" train --dataset imagefolder --data-dir "$data" --model cnn
expect no_dir 2 "needs --data-dir" train --dataset imagefolder
expect size_mnist 2 "--image-size is for --dataset imagefolder" train --image-size 32
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
