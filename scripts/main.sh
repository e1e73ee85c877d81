#!/usr/bin/env bash
# The main job: installs dependencies, builds, and trains the MLP with SPMD on
# Fashion-MNIST (shipped by Debian's dataset-fashion-mnist package).
# Extra arguments go to `tessel train` (e.g. --model cnn --epochs 3).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
# SPMD: the batch is sharded over a mesh of 2 virtual CPU devices (one per core);
# the compiler partitions the step and inserts the gradient all-reduces.
exec build/tessel train --model mlp --dataset fashion-mnist --epochs 5 --mesh data=2 "$@"
