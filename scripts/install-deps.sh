#!/usr/bin/env bash
# Installs every Debian package tessel needs to build, test and train, and
# prepares the GPT's default text corpus (scripts/make-kjv.sh).
# Idempotent: quiet and fast when everything is present. Needs root (or sudo)
# only when something is missing.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config   # toolchain
  libdnnl-dev                        # oneDNN: GEMM and convolution kernels
  zlib1g-dev                         # gzipped IDX datasets
  openmpi-bin libopenmpi-dev         # multi-process runtime
  iproute2 util-linux hostname       # tests/multihost.sh: hosts as network + UTS namespaces
  dataset-fashion-mnist              # the main job's data
  python3-torch python3-numpy        # reference tests and benchmarks
  libopenblas0-openmp                # PyTorch reference without BLAS oversubscription
  libcairo2-dev libfontconfig-dev    # tessel plot: PNG/SVG/PDF drawing, fonts
  fonts-dejavu-core                  # tessel plot: the labels' font
  libglpk-dev                        # auto-sharding's ILP solver (GLPK MIP)
  bible-kjv                          # the GPT's default corpus (scripts/make-kjv.sh)
  libturbojpeg0-dev libpng-dev       # ImageFolder datasets: JPEG and PNG decoding
  python3-pil                        # tests: writing JPEG/PNG files, the reference decode
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The King James Bible as plain text (tessel train --model gpt's default
# --data-file, TS_KJV_TEXT in include/tessel/loader.h): a no-op when present.
kjv=/usr/local/share/tessel/kjv.txt
if [ ! -s "$kjv" ]; then
  $SUDO "$(dirname "$0")/make-kjv.sh" "$kjv"
fi
