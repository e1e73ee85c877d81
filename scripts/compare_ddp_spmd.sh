#!/usr/bin/env bash
# The data-parallel comparison as pictures: the MLP on Fashion-MNIST trained
#   - with classic DDP over 2 processes (mpirun, one replica each),
#   - with SPMD --mesh data=2 over 2 processes (one device each),
#   - on 1 device in 1 process,
# 2 compute threads in all each time (1 per process under mpirun), every run
# with the same seed and batch, each logging --log-json into OUT_DIR; then
# `tessel plot` draws loss by step, loss by training time and test accuracy by
# training time into IMG_DIR, and a summary of the logs is printed.
#
#   scripts/compare_ddp_spmd.sh [BUILD_DIR] [EPOCHS]
#   env: EPOCHS (default 1), OUT_DIR (default BUILD_DIR/compare_ddp_spmd),
#        IMG_DIR (default docs/img), SMOOTH (loss moving average, default 20),
#        PLOT_ONLY=1 (draw again from the logs already in OUT_DIR)
# Times come from step_ms (the steps only, not evaluation or start-up); on a
# machine shared with other work they vary from run to run.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
epochs="${2:-${EPOCHS:-1}}"
out="${OUT_DIR:-$build/compare_ddp_spmd}"
img="${IMG_DIR:-docs/img}"
smooth="${SMOOTH:-20}"
tessel="$build/tessel"
[ -x "$tessel" ] || { echo "compare_ddp_spmd: $tessel not found (run scripts/build.sh $build)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "compare_ddp_spmd: mpirun not found (scripts/install-deps.sh installs openmpi-bin)" >&2; exit 1; }
mkdir -p "$out" "$img"

# as root (containers, CI) OpenMPI wants these; harmless otherwise
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# idle OpenMP threads must not spin on a shared machine
export OMP_WAIT_POLICY=passive
train=(train --model mlp --epochs "$epochs" --seed 0)

if [ "${PLOT_ONLY:-0}" != 1 ]; then
  echo "== DDP, 2 processes x 1 thread =="
  TESSEL_NUM_THREADS=1 mpirun -n 2 --bind-to none "$tessel" "${train[@]}" --parallel ddp \
    --log-json "$out/ddp.jsonl"
  echo "== SPMD --mesh data=2, 2 processes x 1 thread =="
  TESSEL_NUM_THREADS=1 mpirun -n 2 --bind-to none "$tessel" "${train[@]}" --mesh data=2 \
    --log-json "$out/spmd.jsonl"
  echo "== 1 device, 1 process x 2 threads =="
  TESSEL_NUM_THREADS=2 "$tessel" "${train[@]}" --log-json "$out/one.jsonl"
fi

runs=("$out/ddp.jsonl" "$out/spmd.jsonl" "$out/one.jsonl")
labels=(--label "DDP, 2 processes" --label "SPMD data=2, 2 processes" --label "1 device, 1 process")
"$tessel" plot "${runs[@]}" "${labels[@]}" --metric loss --x step --smooth "$smooth" \
  --size 640x400 -o "$img/ddp_vs_spmd_step.png"
"$tessel" plot "${runs[@]}" "${labels[@]}" --metric loss --x time --smooth "$smooth" \
  --size 640x400 -o "$img/ddp_vs_spmd_time.png"
"$tessel" plot "${runs[@]}" "${labels[@]}" --metric test_accuracy --x time \
  --size 640x400 -o "$img/ddp_vs_spmd_accuracy.png"
echo "pictures: $img/ddp_vs_spmd_step.png, $img/ddp_vs_spmd_time.png, $img/ddp_vs_spmd_accuracy.png"

/usr/bin/python3 - "${runs[@]}" <<'PY'
import json, statistics, sys
print(f"{'run':<6} {'steps':>6} {'train s':>8} {'median ms':>10} {'loss, last 50':>14} {'test acc':>9}")
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path) if l.strip()]
    steps = [r for r in rows if "step_ms" in r]
    losses = [r["loss"] for r in steps if r.get("loss") is not None][-50:]
    acc = [r["test_accuracy"] for r in rows if "test_accuracy" in r]
    name = path.rsplit("/", 1)[-1].removesuffix(".jsonl")
    print(f"{name:<6} {len(steps):>6} {sum(r['step_ms'] for r in steps) / 1e3:>8.2f} "
          f"{statistics.median(r['step_ms'] for r in steps):>10.2f} "
          f"{sum(losses) / len(losses):>14.4f} {acc[-1] if acc else float('nan'):>9.4f}")
PY
