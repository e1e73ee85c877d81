#!/usr/bin/env bash
# mesh_axes.sh BUILD_DIR — mesh axis names the CLI does not shard over
# (issue "Hostile inputs, signals and outputs", defect 6): `--mesh Data=2` or
# `foo=2` trained fully replicated without a word; `inspect --mesh data=2
# --axis-names foo` ignored the names. Now an unknown axis is a usage error
# naming the axes understood (data, model, fsdp); inspect refuses
# --axis-names with a named mesh, and takes other names only with --spec.
# A batch that the batch axes do not divide trains with a warning.
set -u
build="${1:?usage: mesh_axes.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_NUM_THREADS=1


expect upper 2 "axis 'Data' is not one tessel shards over: 'data'.*'model'.*'fsdp'" train --mesh Data=2 --steps 1
expect foo 2 "axis 'foo' is not one" train --mesh data=2,foo=2 --steps 1
expect names_twice 2 "--axis-names goes with --mesh SHAPE" inspect --mesh data=2 --axis-names foo
expect inspect_foo 2 "axis 'foo' is not one" inspect --mesh 2 --axis-names foo --no-graph --no-program
expect inspect_unnamed 2 "axis 0 has no name" inspect --mesh 2 --no-graph --no-program
# a batch that does not divide over the batch axes: trained, with a warning that nothing runs data parallel
small_test_set 200
expect uneven 0 "warning: the batch of 64 does not divide over the 3 devices of data=3.*padded to 66 rows.*every device computes every row" \
  train --mesh data=3 --batch 64 --steps 1 --epochs 1 --data-dir "$fm"
expect even 0 "" train --mesh data=3 --batch 66 --steps 1 --epochs 1 --data-dir "$fm"
if ! grep -q warning "$tmp/even.err"; then ok "batch 66 over data=3: no warning"; else bad "batch 66 warned: $(cat "$tmp/even.err")"; fi
# names the user places tensors on with --spec are theirs to choose
expect inspect_spec 0 "" inspect --mesh 2 --axis-names foo --spec x=foo,None,None,None --no-graph --no-program
if grep -q "{devices=\[2,1,1,1\]" "$tmp/inspect_spec.out"; then ok "inspect --spec x=foo,...: x split on foo"
else bad "inspect --spec on axis foo: $(grep -m3 "devices=" "$tmp/inspect_spec.out")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
