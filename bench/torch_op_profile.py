"""torch_op_profile.py — the op-by-op side of torch_convnet_step.py --profile N:
N training steps under torch.profiler (CPU), each op's self time put in one
of the categories bench/trace_ops.py gives tessel's kernels, in ms per step.

Categories come from the op name and, for the backward pass, from the
autograd node that ran it (its nearest "autograd::engine::evaluate_function:
XxxBackward0" ancestor), and "optimizer" from the record_function around
opt.step(); "add_bwd" is the autograd engine summing a gradient with two uses. PyTorch's convolution backward is one op (both directions); when
oneDNN's verbose log (torch.backends.mkldnn.verbose, on for the profiled
steps, its C stdout captured in a temporary file) has them, its backward_data and
backward_weights primitive times split it, and the rest of that op (reorders,
bias gradient) is "conv_bwd_other". Prints one line per category:
  PROFILE torch <model> amp=<none|bf16> cat=<category> ms_per_step=X
"""
import os
import re
import tempfile
from collections import defaultdict

import torch

OPT_LABEL = "## optimizer ##"

# (category, substrings of an autograd node's name) for ops run by the backward pass
_BWD_NODES = [("conv_bwd", ("ConvolutionBackward", "MkldnnConvolutionBackward")),
              ("bn_bwd", ("BatchNormBackward",)), ("relu_bwd", ("ReluBackward", "ThresholdBackward")),
              ("pool_bwd", ("MaxPool2DWithIndicesBackward", "AdaptiveAvgPool2DBackward",
                            "MeanBackward", "AvgPool2DBackward")),
              ("linear_bwd", ("AddmmBackward", "MmBackward", "TBackward")),
              ("loss", ("NllLoss", "LogSoftmax")), ("add_bwd", ("AddBackward",)),
              ("convert", ("ToCopyBackward",))]

# (category, op-name substrings) for the forward pass and the rest
_FWD_OPS = [("conv_fwd", ("convolution",)), ("bn_fwd", ("batch_norm",)),
            ("relu_fwd", ("relu", "threshold", "clamp_min")),
            ("linear_fwd", ("addmm", "aten::mm", "aten::linear", "aten::matmul")),
            ("add_fwd", ("aten::add",)),
            ("pool_fwd", ("max_pool", "adaptive_avg_pool", "avg_pool", "aten::mean")),
            ("loss", ("nll_loss", "log_softmax", "cross_entropy")),
            ("convert", ("aten::to", "_to_copy", "aten::copy_"))]


def _ancestors(ev):
    p = ev.cpu_parent
    while p is not None:
        yield p.name
        p = p.cpu_parent


def category(ev):
    names = list(_ancestors(ev))
    if any(n == OPT_LABEL for n in names):
        return "optimizer"
    node = next((n for n in [ev.name] + names if n.startswith("autograd::engine::evaluate_function")), None)
    if node and ev.name in ("aten::add", "aten::add_"):
        return "add_bwd"  # a gradient summed over two uses (the residual branch)
    if node:
        return next((c for c, keys in _BWD_NODES if any(k in node for k in keys)), "other_bwd")
    return next((c for c, keys in _FWD_OPS if any(k in ev.name for k in keys)), "other")


_VERBOSE = re.compile(r"(?:onednn|dnnl)_verbose,exec,cpu,([a-z_]+),([^,]*),([a-z_]+),.*,([0-9.]+)\s*$")


def _verbose_split(path):
    """ms of oneDNN's convolution backward_data / backward_weights primitives in the log."""
    tot = defaultdict(float)
    with open(path, errors="replace") as f:
        for line in f:
            m = _VERBOSE.match(line)
            if m and m.group(1) == "convolution" and m.group(3) in ("backward_data", "backward_weights"):
                tot[m.group(3)] += float(m.group(4))
    return tot


def profile_steps(step, n):
    """Runs step() n times under the profiler; {category: ms per step}."""
    log = tempfile.NamedTemporaryFile(prefix="torch_op_profile", suffix=".log", delete=False)
    saved = os.dup(1)
    os.dup2(log.fileno(), 1)  # oneDNN's verbose lines (C stdout) go to the log
    try:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON), \
                torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(n):
                step()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    tot = defaultdict(float)
    for ev in prof.events():
        if ev.name != OPT_LABEL and not ev.name.startswith("autograd::engine"):
            tot[category(ev)] += ev.self_cpu_time_total / 1e3
    split = _verbose_split(log.name)
    os.unlink(log.name)
    if split:
        tot["conv_bwd_data"] = split["backward_data"]
        tot["conv_bwd_filter"] = split["backward_weights"]
        tot["conv_bwd_other"] = tot.pop("conv_bwd", 0.0) - tot["conv_bwd_data"] - tot["conv_bwd_filter"]
    return {k: v / n for k, v in tot.items()}
