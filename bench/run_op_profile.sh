#!/usr/bin/env bash
# run_op_profile.sh [BUILD_DIR (build/)] [--model M] [--amp A] [--steps N] [--warmup W] [--batch B]
#                   [--threads T (2)] [--least] [--layout nchw|nhwc] [--torch-layout nchw|nhwc]
# Where the ResNet training step's time goes, op category by op category,
# tessel next to PyTorch (2 threads each, the models, batches and amp of
# run_convnets.sh): tessel's bench_convnet_step with TESSEL_TRACE, its kernels
# summed over the timed steps by bench/trace_ops.py; PyTorch's
# bench/torch_convnet_step.py --profile (torch.profiler self times, oneDNN's
# verbose log splitting the convolution backward). One table per model/amp:
# ms per step per category, both sides, and the tessel - PyTorch difference
# (> 0: tessel loses there). tessel's "fused" programs hold what PyTorch runs
# as batch norm, ReLU, residual adds, the optimizer and the loss: those rows
# are compared as one sum ("elementwise"). Defaults: --model resnet50 --amp
# all, 3 timed steps after 2 warm-up (profiling adds a little to both sides).
# --least (with --threads 1): every kernel / op of the step at its least time
# over the N steps, by position (trace_ops.py --least, torch_convnet_step.py
# --least), where sums follow the host's load; the "step" row is then the
# sum of least kernel / op times (traced) next to the sides' median steps.
# --layout: tessel's activations (bench_convnet_step --layout) [nhwc, tessel's default];
# --torch-layout: PyTorch's (nhwc: torch.channels_last model and input) [nchw].
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
shift || true
. "$here/prologue.bash"
bench_prologue run_op_profile.sh bench_convnet_step torch
model=resnet50 amp=all steps=3 warmup=2 batch=() threads=2 least=() layout=nhwc torch_layout=nchw
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2" ;;
    --amp) amp="$2" ;;
    --steps) steps="$2" ;;
    --warmup) warmup="$2" ;;
    --batch) batch=(--batch "$2") ;;
    --threads) threads="$2" ;;
    --layout) layout="$2" ;;
    --torch-layout) torch_layout="$2" ;;
    --least) least=(--least); shift; continue ;;
    *) echo "run_op_profile.sh: unknown flag '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[ "$amp" = all ] && amps="none bf16" || amps="$amp"
case "$torch_layout" in
  nchw) cl=() ;;
  nhwc) cl=(--channels-last) ;;
  *) echo "run_op_profile.sh: --torch-layout '$torch_layout': expected nchw or nhwc" >&2; exit 2 ;;
esac
for a in $amps; do
  echo "$model amp=$a: tessel $layout ..." >&2
  TESSEL_NUM_THREADS=$threads TESSEL_TRACE="$tmp/trace.json" "$bin" --threads "$threads" --model "$model" --amp "$a" \
    --steps "$steps" --warmup "$warmup" --layout "$layout" "${batch[@]}" | tee -a "$tmp/out.txt" >&2
  /usr/bin/python3 "$here/trace_ops.py" "$tmp/trace.json" --steps "$steps" --label "$model amp=$a" "${least[@]}" >>"$tmp/out.txt"
  echo "$model amp=$a: PyTorch $torch_layout ..." >&2
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=$threads \
    /usr/bin/python3 "$here/torch_convnet_step.py" --threads "$threads" --model "$model" --amp "$a" --steps "$steps" \
    --warmup "$warmup" --profile "$steps" "${batch[@]}" "${least[@]}" "${cl[@]}" | tee -a "$tmp/out.txt" |
    grep RESULT >&2
done
/usr/bin/python3 - "$tmp/out.txt" "tessel $layout, PyTorch $torch_layout" <<'PY'
import sys
from collections import defaultdict
prof = defaultdict(lambda: defaultdict(float))  # (label) -> side:cat -> ms
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("PROFILE "):
        kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
        prof[f"{f[2]} amp={kv['amp']}"][f[1] + ":" + kv["cat"]] += float(kv["ms_per_step"])
    elif line.startswith("RESULT "):
        kv = dict(x.split("=", 1) for x in f[3:] if "=" in x)
        prof[f"{f[2]} amp={kv['amp']}"][f[1] + ":median_step"] = float(kv["median_ms"])
ELEMENTWISE_TORCH = ("bn_fwd", "bn_bwd", "relu_fwd", "relu_bwd", "add_fwd", "add_bwd", "optimizer", "loss",
                     "other", "other_bwd")
ROWS = [("conv forward", ["conv_fwd"], ["conv_fwd"]),
        ("conv backward-data", ["conv_bwd_data"], ["conv_bwd_data"]),
        ("conv backward-filter", ["conv_bwd_filter"], ["conv_bwd_filter"]),
        ("conv bwd other (reorders)", [], ["conv_bwd_other"]),
        ("max/avg pool forward", ["pool_fwd"], ["pool_fwd"]),
        ("max/avg pool backward", ["pool_bwd"], ["pool_bwd"]),
        ("linear (fwd+bwd)", ["linear"], ["linear_fwd", "linear_bwd"]),
        ("converts", ["convert"], ["convert"]),
        ("elementwise (sum of below)", ["fused", "reduce", "other"], list(ELEMENTWISE_TORCH))] + \
       [("  torch " + c, [], [c]) for c in ELEMENTWISE_TORCH] + \
       [("  tessel " + c, [c], []) for c in ("fused", "reduce", "other")] + \
       [("all kernels / ops", ["conv_fwd", "conv_bwd_data", "conv_bwd_filter", "pool_fwd", "pool_bwd", "linear",
                               "convert", "fused", "reduce", "other"], None),
        ("step (traced / median)", ["step"], ["median_step"])]
for label, d in prof.items():
    print(f"\n{label} ({sys.argv[2]}): ms per step     tessel   PyTorch   tessel-PyTorch")
    allt = sum(v for k, v in d.items() if k.startswith("torch:") and k != "torch:median_step")
    for name, tc, pc in ROWS:
        t = sum(d.get("tessel:" + c, 0.0) for c in tc)
        p = allt if pc is None else sum(d.get("torch:" + c, 0.0) for c in pc)
        print(f"  {name:27s} {t:9.1f} {p:9.1f} {t - p:+10.1f}")
PY
