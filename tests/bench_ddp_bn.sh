#!/usr/bin/env bash
# bench_ddp_bn.sh BUILD_DIR — bench_train_step's two DDP programs for a model
# with batch norm (bench/run_multihost.sh's DDP and DDP-SBN rows), ResNet-20
# at a global batch of 8 over 2 processes, 2 steps:
#  - --parallel ddp (sync_bn, the default): batch norm over the global batch,
#    so the second-step loss equals 1 process's on the whole batch (1e-4
#    relative), and RESULT says sync_bn=1;
#  - --parallel ddp --local-bn: each replica's own rows (tessel train's DDP
#    default), RESULT says sync_bn=0 and the loss is another one.
set -u
build="${1:?usage: bench_ddp_bn.sh BUILD_DIR}"
bench="$build/bench_train_step"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
need_mpirun # fails the test without mpirun; OpenMPI's settings for root and ASan
args=(--model resnet20 --batch 8 --steps 2 --warmup 0 --threads 1)
result() { # result NAME PROCS ARGS...: rank 0's RESULT line into $tmp/NAME
  local name="$1" np="$2"
  shift 2
  if [ "$np" = 0 ]; then
    TESSEL_NUM_THREADS=1 timeout -k 5 120 "$bench" "${args[@]}" "$@" >"$tmp/$name" 2>"$tmp/$name.err"
  else
    TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n "$np" --oversubscribe --bind-to none -x TESSEL_NUM_THREADS \
      "$bench" "${args[@]}" "$@" >"$tmp/$name" 2>"$tmp/$name.err"
  fi
  grep -q '^RESULT ' "$tmp/$name" || bad "$name: no RESULT line: $(tail -3 "$tmp/$name.err")"
}
field() { sed -n "s/^RESULT .* $2=\([^ ]*\).*/\1/p" "$tmp/$1"; }
result one 0
result sync 2 --parallel ddp
result local 2 --parallel ddp --local-bn
o=$(field one check_loss) s=$(field sync check_loss) l=$(field local check_loss)
if [ "$(field sync sync_bn)" = 1 ] && [ "$(field local sync_bn)" = 0 ]; then ok "RESULT sync_bn=1 / 0"
else bad "RESULT sync_bn: '$(field sync sync_bn)' / '$(field local sync_bn)', want 1 / 0"; fi
if /usr/bin/python3 -c "import sys; o, s = map(float, sys.argv[1:]); sys.exit(abs(s - o) > 1e-4 * max(1, abs(o)))" \
  "$o" "$s" 2>/dev/null; then ok "DDP sync-bn: second-step loss $s = 1 process's $o (1e-4)"
else bad "DDP sync-bn: second-step loss '$s' vs 1 process '$o'"; fi
if [ -n "$l" ] &&
  /usr/bin/python3 -c "import sys; o, l = map(float, sys.argv[1:]); sys.exit(abs(l - o) < 1e-6 * abs(o))" "$o" "$l"
then ok "DDP --local-bn: another loss ($l vs $o): each replica's statistics"
else bad "DDP --local-bn: loss '$l' equals 1 process's '$o': statistics not local?"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
