#!/usr/bin/python3
"""torch_ddp.py — the PyTorch data-parallel reference for issue 4: the training
step of bench/torch_train_step.py (same MLP / MNIST CNN with dropout, AdamW
foreach, random pre-generated data cycled over a few batches) under
DistributedDataParallel with the gloo backend, --procs processes (default 2),
each with 1 thread, on the loopback interface only.

The GLOBAL batch is the single-process one (MLP 128, CNN 64); each rank takes
its 1/procs slice. One step = zero_grad, forward, cross-entropy, backward (DDP
all-reduces the gradients), optimizer step, loss.item(). Rank 0 times each step
after the warmup; no extra barrier: the gradient all-reduce synchronizes the
ranks every step.

  usage: torch_ddp.py [--model mlp|cnn|all] [--steps N] [--warmup N] [--procs N (2)]
                      [--optimizer adamw|sgd]

Prints from rank 0:
  RESULT torch-ddp <model> batch=<global B> procs=P steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=..
         samples_per_s=.. final_loss=L
(samples/s = global batch / median; L the last step's loss averaged over the
ranks, after the timing: the global batch's loss, as torch_train_step.py's).
Warm-up: 20 steps by default, as torch_train_step.py and bench_train_step. Run it with
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp OMP_NUM_THREADS=1 (as
bench/run_ddp.sh does) so BLAS does not start its own extra threads.
"""
import argparse
import datetime
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from torch_train_step import batches, build, make_optimizer, time_steps  # noqa: E402  (same models, data, timing)


def bench(model, gb, steps, warmup, optimizer, rank, world):
    if gb % world:
        raise SystemExit(f"torch_ddp.py: global batch {gb} not divisible by {world} processes")
    b = gb // world
    torch.manual_seed(1)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    net = DDP(build(model).train())
    opt = make_optimizer(net.parameters(), optimizer)
    # The global batches of torch_train_step.py; this rank keeps its slice.
    xs, ys = batches(gb)
    xs = xs[:, rank * b:(rank + 1) * b].contiguous()
    ys = ys[:, rank * b:(rank + 1) * b].contiguous()
    torch.manual_seed(1 + rank)  # independent dropout masks per rank
    med, p25, p75, last = time_steps(net, opt, xs, ys, steps, warmup)
    # the global batch's loss: the mean of the ranks' (equal slices); outside the timing
    mean = torch.tensor([last], dtype=torch.float64)
    dist.all_reduce(mean)
    final = mean.item() / world
    if rank == 0:
        print(f"RESULT torch-ddp {model} batch={gb} procs={world} steps={steps} warmup={warmup} median_ms={med:.3f} "
              f"p25_ms={p25:.3f} p75_ms={p75:.3f} samples_per_s={1e3 * gb / med:.1f} final_loss={final:.9g}",
              flush=True)


def worker(rank, world, port, a):
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        if a.model != "cnn":
            bench("mlp", 128, a.steps or 100, a.warmup, a.optimizer, rank, world)
        if a.model != "mlp":
            bench("cnn", 64, a.steps or 30, a.warmup, a.optimizer, rank, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn", "all"], default="all")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    a = ap.parse_args()
    if a.procs < 1 or a.steps < 0 or a.warmup < 0:
        ap.error("--procs must be >= 1, --steps/--warmup >= 0")
    # Loopback only: gloo otherwise picks the interface the hostname resolves to.
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    port = free_port()
    os.environ["MASTER_PORT"] = str(port)
    mp.spawn(worker, args=(a.procs, port, a), nprocs=a.procs, join=True)


if __name__ == "__main__":
    main()
