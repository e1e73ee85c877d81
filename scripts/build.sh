#!/usr/bin/env bash
# Configures and builds tessel into a build directory (default: build).
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# Quiet on success; prints the compiler output on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
mkdir -p "$dir"
log="$dir/build.log"
if ! { cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" && cmake --build "$dir" -j"$(nproc)"; } >"$log" 2>&1; then
  grep -E "error|warning|Error" "$log" | head -50 || tail -50 "$log"
  echo "build failed (full log: $log)" >&2
  exit 1
fi
