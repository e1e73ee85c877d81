#!/usr/bin/env bash
# run_onednn_least.sh [BUILD_DIR (build/)] [--model M (resnet20)] [--amp A (bf16)] [--steps N (6)] [--warmup W (2)]
#                     [--layout nchw|nhwc] [--torch-layout nchw|nhwc] [--versus torch|layouts]
# tessel's and PyTorch's oneDNN primitives in one ResNet training step, shape
# by shape, in least times (bench/onednn_least.py): both sides on 1 thread
# with ONEDNN_VERBOSE=1, the same model, batch and amp as run_convnets.sh.
# Least times over W+N runs of each primitive hold up on a loaded host, where
# run_op_profile.sh's sums do not. Prints the per-kind table and one SHAPE
# line per convolution (each side's oneDNN implementation, count, least ms).
# --layout: tessel's activations [nchw]; --torch-layout: PyTorch's (nhwc:
# torch.channels_last) [nchw]; --versus layouts: tessel nchw against tessel
# nhwc instead of PyTorch (reorders included: conv.c's weight reorders in nhwc,
# activation and weight reorders in nchw).
#
# Stop 33 (conv13), ResNet-20 bf16 b128, 1 thread, least times, host load 7-10
# on 2 cores (so no 2-thread number here decides anything):
#  (a) whole step by kind, `bash bench/run_op_profile.sh /work/main/build --model
#      resnet20 --amp bf16 --steps 8 --warmup 2 --threads 1 --least` (tessel's
#      conv kernels include its own reorders and blk16 transposes; PyTorch's conv
#      ops theirs; the profiler and oneDNN verbose add some to PyTorch's side):
#        kind, ms/step                   tessel  PyTorch  tessel-PyTorch
#        conv forward                      46.3     58.4     -12.1
#        conv bwd-data + bwd-weights       99.4    157.0     -57.6 (torch: 27.9+39.7+89.4 reorders/other)
#        bn/relu/add/optimizer (fused)     48.2     45.3      +3.3
#        pool, linear, converts, other      0.6      2.1      -1.5
#        all kernels / ops                194.6    262.9     -68.3
#  (b) oneDNN primitives alone, this script on /work/main/build (8 runs each):
#        conv fwd 28.02 / 26.26, bwd-data 26.70 / 25.90, bwd-weights 42.41 /
#        37.26, reorder 0.38 / 45.77, all 97.53 / 135.21 ms (tessel / PyTorch).
#      Every 3x3 shape takes the same implementation on both sides (jit_bf16)
#      within 0-15%; the 1x1 projections did not: tessel's plain path ran
#      oneDNN's gemm convolution (16->32: fwd 1.958, bwd-data 0.975, bwd-weights
#      2.055 ms; 32->64 bwd-weights 0.460) where PyTorch's jit_bf16_1x1 takes
#      0.272 / 0.327 / 0.243 / 0.142: 4.5 of the +7.7 ms tessel's convs lose.
#      conv.c now keeps bf16 1x1s with < 64 input channels on the blocked path.
#  The only kind where tessel spends more than PyTorch on 1 thread is the
#  elementwise work (+3 ms, 7%; src/kernels/fused_fast.c); on 1 thread tessel's
#  kernels sum to 0.74x PyTorch's ops, so the 2-thread ratio (0.95-1.11x in
#  stop 32) is lost in how the step scales to 2 threads, not in a kernel.
#  Left (same script on 4a86539, load 10-11, 6-8 runs): ResNet-18 bf16 b32's
#  1x1 projections (64+ channels) still run plain and lose to jit_bf16_1x1 too:
#  64->128 fwd 3.130 / 0.609, bwd-data 1.670 / 0.633, bwd-weights 2.563 /
#  0.868; 128->256 and 256->512 bwd-weights 0.709 / 0.465, 0.763 / 0.569 ms
#  (about 5.7 ms of a ~430 ms 1-thread step, reorders not counted). ResNet-50
#  b8's plain filter gradients are at or ahead of PyTorch's (e.g. 2048->512
#  7x7 2.461 / 3.288), its plain forward/backward-data 30-50% behind on the
#  primitive alone (the reorders they save paid for that when plain_fits was
#  measured). A per-image size rule (C*O*OH*OW: ResNet-18's 2.1M against
#  ResNet-50's 12.8M+) would separate them; not tried.
#
# Stop 34 (nhwc15), --versus layouts, ResNet-20 fp32 b128, 1 thread, 6+2 runs, load 8:
#   kind, ms/step (least)   nchw    nhwc
#   conv fwd               66.46   77.46  (nhwc: brgconv / brgconv_1x1 on nxc; nchw: jit on nChw16c, 1x1 gemm)
#   conv bwd-data          84.49   78.64  (jit / jit_1x1 on both)
#   conv bwd-weights       86.65   65.42
#   reorder                56.78    0.75  (nhwc: the weights' only, Acdb16a / ABcd16a16b in, ABcd16b16a out)
#   all                   294.41  222.30  (nhwc 0.76x)
# NHWC's forward loses on the 16-channel 32x32 layers (brgconv 5.92 vs blocked jit 4.57 ms each, x6).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
model=resnet20 amp=bf16 steps=6 warmup=2 layout=nchw torch_layout=nchw versus=torch
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2" ;;
    --amp) amp="$2" ;;
    --steps) steps="$2" ;;
    --warmup) warmup="$2" ;;
    --layout) layout="$2" ;;
    --torch-layout) torch_layout="$2" ;;
    --versus) versus="$2" ;;
    *) echo "run_onednn_least.sh: unknown flag '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
tessel() { # tessel LAYOUT LOG
  ONEDNN_VERBOSE=1 OMP_WAIT_POLICY=passive TESSEL_NUM_THREADS=1 nice "$build/bench_convnet_step" --threads 1 \
    --model "$model" --amp "$amp" --steps "$steps" --warmup "$warmup" --layout "$1" >"$2" 2>&1
}
case "$versus" in
  torch)
    tessel "$layout" "$tmp/tessel.log"
    cl=()
    [ "$torch_layout" = nhwc ] && cl=(--channels-last)
    ONEDNN_VERBOSE=1 LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=1 nice \
      /usr/bin/python3 "$here/torch_convnet_step.py" --threads 1 --model "$model" --amp "$amp" --steps "$steps" \
      --warmup "$warmup" "${cl[@]}" >"$tmp/torch.log" 2>&1
    labels="tessel-$layout,torch-$torch_layout" ;;
  layouts)
    tessel nchw "$tmp/tessel.log"
    tessel nhwc "$tmp/torch.log"
    labels="nchw,nhwc" ;;
  *) echo "run_onednn_least.sh: --versus '$versus': expected torch or layouts" >&2; exit 2 ;;
esac
grep -h '^RESULT' "$tmp/tessel.log" "$tmp/torch.log" || true
echo "$model amp=$amp, 1 thread, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 "$here/onednn_least.py" "$tmp/tessel.log" "$tmp/torch.log" --runs $((steps + warmup)) --shapes \
  --labels "$labels"
