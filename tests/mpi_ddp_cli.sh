#!/usr/bin/env bash
# mpi_ddp_cli.sh BUILD_DIR — `tessel train --parallel ddp` and the CNN under mpirun
# (split from tests/mpi_train.sh, which has the helpers' story: tests/mpi_cli.bash).
#  - --parallel ddp (one replica per process, 2 and 3 processes) follows the
#    1-device curve within 1e-4, the replicas' parameters checked identical
#    every 10 steps (--check-replicas);
#  - the MNIST CNN for 10 steps on --mesh data=2 over 2 processes follows the
#    1-device CNN within 1e-4 (dropout partitioned: the same masks); with
#    --parallel ddp it runs with identical replicas (each replica draws its
#    own dropout masks by design, so its curve is not the 1-device one:
#    tests/mpi_ddp.c checks DDP's CNN numbers without dropout).
set -u
build="${1:?usage: mpi_ddp_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/mpi_cli.bash" # $tmp, ok, bad, $fm, mpi, run, compare

run one 0
run one126 0 --batch 126
run ddp2 2 --parallel ddp --check-replicas 10
run ddp3 3 --parallel ddp --batch 126 --check-replicas 10
model=cnn run cnn1 0
model=cnn run mpcnn 2 --mesh data=2
model=cnn run cnnddp 2 --parallel ddp --check-replicas 5

compare one ddp2 1e-4
compare one126 ddp3 1e-4
compare cnn1 mpcnn 1e-4 10
# DDP CNN: exit 0 with --check-replicas 5 (above) says the replicas stayed
# identical; the loss is that of a training run
if /usr/bin/python3 - "$tmp/cnnddp.json" <<'PY'
import json, math, sys
l = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert len(l) == 10 and all(math.isfinite(x) for x in l), f"losses {l}"
assert sum(l[-3:]) < sum(l[:3]), f"loss did not decrease: {l}"
PY
then ok "DDP CNN: 10 finite, decreasing losses"; else bad "DDP CNN losses ($tmp/cnnddp.json)"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
