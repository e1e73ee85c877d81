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


def _verbose_split(path, n=1, least=False):
    """ms of oneDNN's convolution backward_data / backward_weights primitives in
    the log; with least, per step: the log's n steps' i-th such primitives at
    their least time (the log must hold the same sequence n times)."""
    rows = []
    with open(path, errors="replace") as f:
        for line in f:
            m = _VERBOSE.match(line)
            if m and m.group(1) == "convolution" and m.group(3) in ("backward_data", "backward_weights"):
                rows.append((m.group(3), float(m.group(4))))
    tot = defaultdict(float)
    if least and rows and len(rows) % n == 0:
        k = len(rows) // n
        for i in range(k):
            tot[rows[i][0]] += min(rows[j * k + i][1] for j in range(n)) * n
    else:
        for kind, ms in rows:
            tot[kind] += ms
    return tot


STEP_LABEL = "## step ##"


def _least_by_position(events, n):
    """{category: ms over n steps} where each op of the step, keyed by its name
    and category and which occurrence of that key in the step it is (the
    steps' op sequences differ by a few ops), counts n times its least self
    time over the steps that have it (at least half of them)."""
    steps = sorted((e for e in events if e.name == STEP_LABEL), key=lambda e: e.time_range.start)
    idx = {id(e): i for i, e in enumerate(steps)}
    per = [defaultdict(list) for _ in steps]
    for ev in sorted(events, key=lambda e: e.time_range.start):
        if ev.name in (OPT_LABEL, STEP_LABEL) or ev.name.startswith("autograd::engine"):
            continue
        p = ev.cpu_parent
        while p is not None and id(p) not in idx:
            p = p.cpu_parent
        if p is not None:
            per[idx[id(p)]][(category(ev), ev.name)].append(ev.self_cpu_time_total / 1e3)
    best = defaultdict(list)
    for st in per:
        for key, times in st.items():
            for k, ms in enumerate(times):
                best[key + (k,)].append(ms)
    tot = defaultdict(float)
    for key, times in best.items():
        if 2 * len(times) >= len(per):
            tot[key[0]] += min(times) * n
    return tot


def profile_steps(step, n, least=False):
    """Runs step() n times under the profiler; {category: ms per step}: sums of
    self times, or with least each op of the step at its least time (by
    position: on a loaded host nearer the unloaded time)."""
    log = tempfile.NamedTemporaryFile(prefix="torch_op_profile", suffix=".log", delete=False)
    saved = os.dup(1)
    os.dup2(log.fileno(), 1)  # oneDNN's verbose lines (C stdout) go to the log
    try:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON), \
                torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(n):
                with torch.profiler.record_function(STEP_LABEL):
                    step()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    tot = defaultdict(float)
    if least:
        tot = _least_by_position(prof.events(), n)
    else:
        for ev in prof.events():
            if ev.name not in (OPT_LABEL, STEP_LABEL) and not ev.name.startswith("autograd::engine"):
                tot[category(ev)] += ev.self_cpu_time_total / 1e3
    split = _verbose_split(log.name, n, least)
    os.unlink(log.name)
    if split:
        tot["conv_bwd_data"] = split["backward_data"]
        tot["conv_bwd_filter"] = split["backward_weights"]
        tot["conv_bwd_other"] = tot.pop("conv_bwd", 0.0) - tot["conv_bwd_data"] - tot["conv_bwd_filter"]
    return {k: v / n for k, v in tot.items()}
