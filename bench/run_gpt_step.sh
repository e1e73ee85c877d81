#!/usr/bin/env bash
# run_gpt_step.sh [BUILD_DIR (build/)] [extra flags for both sides]
# The GPT training step of ../shared/peer-baselines.md (6 layers, d_model 256,
# 4 heads, seq 128, vocab 8192 synthetic tokens, batch 8, AdamW, fp32) in
# tessel (BUILD_DIR/bench_gpt_step: `tessel train --model gpt`'s program)
# and PyTorch (bench/torch_gpt_step.py: nanoGPT's model) in one invocation, 2
# threads each, from the same initial weights and batches (tessel draws and
# dumps them; PyTorch loads them), alternating for $ROUNDS rounds (default 3).
# Prints each side's best round's median step time and tokens/s, the ratio
# tessel/PyTorch (> 1: tessel is faster), and checks that both computed the
# same first loss (1e-4 relative; exit 1 otherwise).
#   e.g. bench/run_gpt_step.sh build                      # the peer-baselines row
#        bench/run_gpt_step.sh build --layers 1 --d-model 32 --heads 2 --seq 16 --vocab 64 --steps 3 --warmup 1
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
. "$here/prologue.bash"
bench_prologue run_gpt_step.sh bench_gpt_step torch
rounds="${ROUNDS:-3}"
for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: tessel ..." >&2
  TESSEL_NUM_THREADS=2 "$bin" --threads 2 --dump "$tmp" "$@" | tee -a "$tmp/tessel.txt" >&2
  echo "round $r/$rounds: PyTorch ..." >&2
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
    /usr/bin/python3 "$here/torch_gpt_step.py" --threads 2 --init "$tmp" "$@" | tee -a "$tmp/torch.txt" >&2
done
/usr/bin/python3 - "$tmp/tessel.txt" "$tmp/torch.txt" "$rounds" <<'PY'
import sys
def best(path):
    rows = [dict(kv.split("=", 1) for kv in l.split()[3:]) for l in open(path) if l.startswith("RESULT ")]
    return min(rows, key=lambda r: float(r["median_ms"]))
a, b = best(sys.argv[1]), best(sys.argv[2])
print(f"GPT training step, batch {a['batch']} x seq {a['seq']}, best of {sys.argv[3]} rounds (median ms, IQR)")
for name, r in (("tessel", a), ("PyTorch", b)):
    print(f"  {name:<8} {float(r['median_ms']):9.2f} ms ({float(r['p25_ms']):.2f}-{float(r['p75_ms']):.2f})"
          f"  {float(r['tokens_per_s']):9.0f} tokens/s  first loss {r['first_loss']}")
ratio = float(a["tokens_per_s"]) / float(b["tokens_per_s"])
print(f"  tessel/PyTorch: {ratio:.2f}x tokens/s")
la, lb = float(a["first_loss"]), float(b["first_loss"])
ok = abs(la - lb) <= 1e-4 * max(abs(la), abs(lb))
print(f"  first loss {'equal' if ok else 'DIFFERS'} (tessel {la:.9g}, PyTorch {lb:.9g})")
sys.exit(0 if ok else 1)
PY
