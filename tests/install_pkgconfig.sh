#!/usr/bin/env bash
# Installs tessel into a temporary prefix and builds the example program
# against it with pkg-config only, as a user would:
#   cc app.c $(pkg-config --cflags --libs tessel)
set -u
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $*"; fi; }

check cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pcdir=$(dirname "$(find "$tmp/prefix" -name tessel.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir
src=$(dirname "$0")/../examples/train_mlp.c
check test -f "$tmp/prefix/include/tessel/tessel.h"
check test -x "$tmp/prefix/bin/tessel"
check cc "$src" -o "$tmp/app" $(pkg-config --cflags --libs tessel)
# The installed example runs against the installed shared library.
check env LD_LIBRARY_PATH="$(pkg-config --variable=libdir tessel)" "$tmp/app" --help >/dev/null
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
