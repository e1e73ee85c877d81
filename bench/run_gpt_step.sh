#!/usr/bin/env bash
# run_gpt_step.sh [BUILD_DIR (build/)] [extra flags for both sides]
# The GPT training step of ../shared/peer-baselines.md (6 layers, d_model 256,
# 4 heads, seq 128, vocab 8192 synthetic tokens, batch 8, AdamW, fp32) in
# tessel (BUILD_DIR/bench_gpt_step: `tessel train --model gpt`'s program)
# and PyTorch (bench/torch_gpt_step.py: nanoGPT's model) in one invocation, 2
# threads each, from the same initial weights and batches (tessel draws and
# dumps them; PyTorch loads them), alternating for $ROUNDS rounds (default 3).
# Each round runs both precisions of $AMP (default "none bf16": fp32, then
# bf16 autocast — tessel's --amp bf16, PyTorch's torch.autocast('cpu',
# bfloat16) around forward and loss). Prints per precision each side's best
# round's median step time and tokens/s, the ratio tessel/PyTorch (> 1:
# tessel is faster), and checks that both computed the same first loss
# (relative 1e-4 in fp32, 1e-3 in bf16 (measured 8e-6 at the default size); exit 1 otherwise).
#   e.g. bench/run_gpt_step.sh build                      # the peer-baselines row, fp32 and bf16
#        AMP=none bench/run_gpt_step.sh build             # fp32 only
#        bench/run_gpt_step.sh build --layers 1 --d-model 32 --heads 2 --seq 16 --vocab 64 --steps 3 --warmup 1
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
. "$here/prologue.bash"
bench_prologue run_gpt_step.sh bench_gpt_step torch
rounds="${ROUNDS:-3}"
amps="${AMP:-none bf16}"
for r in $(seq 1 "$rounds"); do
  for amp in $amps; do
    echo "round $r/$rounds amp=$amp: tessel ..." >&2
    TESSEL_NUM_THREADS=2 "$bin" --threads 2 --amp "$amp" --dump "$tmp" "$@" | tee -a "$tmp/tessel.txt" >&2
    echo "round $r/$rounds amp=$amp: PyTorch ..." >&2
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=2 \
      /usr/bin/python3 "$here/torch_gpt_step.py" --threads 2 --amp "$amp" --init "$tmp" "$@" | tee -a "$tmp/torch.txt" >&2
  done
done
/usr/bin/python3 - "$tmp/tessel.txt" "$tmp/torch.txt" "$rounds" $amps <<'PY'
import sys
# first-loss bounds (relative): fp32 computes the same numbers; bf16 rounds the
# matmul operands and results to 8 bits of mantissa (2^-8 = 3.9e-3 relative)
# on both sides, in different places (tessel's fused attention stays f32,
# PyTorch's explicit attention runs its two matmuls and the softmax in bf16)
TOL = {"none": 1e-4, "bf16": 1e-3}
def best(path, amp):
    rows = [dict(kv.split("=", 1) for kv in l.split()[3:]) for l in open(path) if l.startswith("RESULT ")]
    rows = [r for r in rows if r.get("amp", "none") == amp]
    return min(rows, key=lambda r: float(r["median_ms"]))
ok_all = True
for amp in sys.argv[4:]:
    a, b = best(sys.argv[1], amp), best(sys.argv[2], amp)
    name = "fp32" if amp == "none" else amp + " autocast"
    print(f"GPT training step, {name}, batch {a['batch']} x seq {a['seq']}, best of {sys.argv[3]} rounds (median ms, IQR)")
    for who, r in (("tessel", a), ("PyTorch", b)):
        print(f"  {who:<8} {float(r['median_ms']):9.2f} ms ({float(r['p25_ms']):.2f}-{float(r['p75_ms']):.2f})"
              f"  {float(r['tokens_per_s']):9.0f} tokens/s  first loss {r['first_loss']}")
    ratio = float(a["tokens_per_s"]) / float(b["tokens_per_s"])
    print(f"  tessel/PyTorch: {ratio:.2f}x tokens/s")
    la, lb = float(a["first_loss"]), float(b["first_loss"])
    rel = abs(la - lb) / max(abs(la), abs(lb))
    ok = rel <= TOL[amp]
    ok_all = ok_all and ok
    print(f"  first loss {'agrees' if ok else 'DIFFERS'} (tessel {la:.9g}, PyTorch {lb:.9g}, relative {rel:.2g}, "
          f"bound {TOL[amp]:g})")
sys.exit(0 if ok_all else 1)
PY
