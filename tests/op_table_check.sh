#!/usr/bin/env bash
# op_table_check.sh BUILD_DIR — adding an op to src/ir/ops.def without its
# rules must not build. -DTS_TEST_DUMMY_OP appends an op "dummy" to the
# list (a table line and nothing else); then every file holding a per-op
# rule (shape inference, adjoint, kernel dispatch, sharding propagation,
# partitioning) must fail to compile, naming TS_OP_DUMMY, while the files that
# only read the table (op table, printer, serializer, CSE, fusion) must
# compile as they are. Without the define every file compiles.
set -u
build="${1:?usage: op_table_check.sh BUILD_DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="$build/CMakeCache.txt"
cc="$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$cache")"
dnnl="$(sed -n 's/^DNNL_INCLUDE_DIR:[A-Z]*=//p' "$cache")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C # plain quotes in compiler messages
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

# The project's switch warning is an error in every build (CMakeLists.txt).
compile() { # compile FILE [defines...]
  local f="$1"
  shift
  "${cc:-cc}" -std=c11 -fopenmp -Wall -Werror=switch -fsyntax-only -I"$root/include" -I"$root/src" \
    ${dnnl:+-I"$dnnl"} "$@" "$root/$f" >"$tmp/out" 2>&1
}

rules="src/ir/infer.c src/ad/adjoints.c src/kernels/dispatch.c src/spmd/propagate.c src/spmd/partition.c"
table="src/ir/ir_ops.c src/ir/print.c src/ir/serialize.c src/opt/cse.c src/opt/fuse.c"

for f in $rules $table; do
  if compile "$f"; then ok "$f compiles"; else bad "$f does not compile: $(head -5 "$tmp/out")"; fi
done
for f in $rules; do
  if compile "$f" -DTS_TEST_DUMMY_OP; then
    bad "$f compiles with an op that has no rule in it"
  elif grep -q "TS_OP_DUMMY" "$tmp/out"; then
    ok "$f fails without a rule for the dummy op"
  else
    bad "$f fails for another reason: $(head -5 "$tmp/out")"
  fi
done
for f in $table; do
  if compile "$f" -DTS_TEST_DUMMY_OP; then ok "$f needs nothing but the table line"
  else bad "$f needs more than the table line: $(head -5 "$tmp/out")"; fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
