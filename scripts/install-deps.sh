#!/usr/bin/env bash
# Installs every Debian package tessel needs to build, test and train.
# Idempotent: quiet and fast when everything is present. Needs root (or sudo)
# only when something is missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config   # toolchain
  libdnnl-dev                        # oneDNN: GEMM and convolution kernels
  zlib1g-dev                         # gzipped IDX datasets
  openmpi-bin libopenmpi-dev         # multi-process runtime
  dataset-fashion-mnist              # the main job's data
  python3-torch python3-numpy        # reference tests and benchmarks
  libopenblas0-openmp                # PyTorch reference without BLAS oversubscription
  libcairo2-dev libfontconfig-dev    # tessel plot: PNG/SVG/PDF drawing, fonts
  fonts-dejavu-core                  # tessel plot: the labels' font
  libglpk-dev                        # auto-sharding's ILP solver (GLPK MIP)
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
