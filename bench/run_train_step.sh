#!/usr/bin/env bash
# run_train_step.sh [BUILD_DIR (build/)] [extra flags for both benchmarks]
# Runs the tessel training-step benchmark (BUILD_DIR/bench_train_step) and the
# PyTorch one (bench/torch_train_step.py) in one invocation, same models, batch
# sizes, optimizer and thread count, and prints a side-by-side table of median
# step times and the throughput ratio tessel/PyTorch (> 1: tessel is faster).
# The two alternate for $ROUNDS rounds (default 3); the table shows, per side and
# model, the round with the lowest median (the least disturbed by other load),
# and each side's final loss (their initializations differ: shown, not
# compared). Both sides warm up for the same $WARMUP steps (default 20).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
. "$here/prologue.bash"
bench_prologue run_train_step.sh bench_train_step torch
rounds="${ROUNDS:-3}"
warmup=(--warmup "${WARMUP:-20}") # the same warm-up on both sides
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: tessel ..." >&2
  TESSEL_NUM_THREADS=2 "$bin" --threads 2 "${warmup[@]}" "$@" | tee -a "$tmp/tessel.txt" >&2
  echo "round $r/$rounds: PyTorch ..." >&2
  # OpenMP OpenBLAS: BLAS threads follow torch.set_num_threads (no oversubscription).
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
    /usr/bin/python3 "$here/torch_train_step.py" --threads 2 "${warmup[@]}" "$@" | tee -a "$tmp/torch.txt" >&2
done

/usr/bin/python3 - "$tmp/tessel.txt" "$tmp/torch.txt" "$rounds" <<'PY'
import sys
def load(path):
    out = {}
    for line in open(path):
        if line.startswith("RESULT "):
            f = line.split()
            r = dict(kv.split("=", 1) for kv in f[3:] if "=" in kv)
            if f[2] not in out or float(r["median_ms"]) < float(out[f[2]]["median_ms"]):
                out[f[2]] = r  # the least disturbed round
    return out
ts, pt = load(sys.argv[1]), load(sys.argv[2])
print(f"best of {sys.argv[3]} rounds; ms per step: median (IQR)")
print(f"{'model':<6} {'batch':>5} | {'tessel ms (IQR)':>22} {'samples/s':>10} | "
      f"{'PyTorch ms (IQR)':>22} {'samples/s':>10} | {'tessel/PyTorch':>14} | final loss tessel / PyTorch")
for m in ("mlp", "cnn"):
    if m not in ts or m not in pt:
        continue
    a, b = ts[m], pt[m]
    iqr = lambda r: f"{float(r['median_ms']):8.2f} ({float(r['p25_ms']):.2f}-{float(r['p75_ms']):.2f})"
    ratio = float(a["samples_per_s"]) / float(b["samples_per_s"])
    print(f"{m:<6} {a['batch']:>5} | {iqr(a):>22} {float(a['samples_per_s']):>10.0f} | "
          f"{iqr(b):>22} {float(b['samples_per_s']):>10.0f} | {ratio:>13.2f}x | "
          f"{a.get('final_loss', '?')} / {b.get('final_loss', '?')}")
PY
