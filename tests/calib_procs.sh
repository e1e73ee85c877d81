#!/usr/bin/env bash
# calib_procs.sh BUILD_DIR — `mpirun -n 2 tessel plan --calibrate FILE`
# (tools/calprocs.c, issue 16): process 0 merges the links between the 2
# processes into FILE, keeping its other lines: every allreduce.procs2.* key
# and step_overhead.procs2_s, a positive number each, the in-cache beta
# (cached_bytes_per_s, 1 MiB per process) among them; `tessel inspect
# --processes 2 --device FILE` reads them, and the MLP's data=2 collectives
# (at most cache_bytes each) take the in-cache beta: its prediction moves
# when that key is dropped. The numbers are this (shared) machine's: only
# their presence is checked. About 5 s on 2 idle cores.
set -u
build="${1:?usage: calib_procs.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
need_mpirun # OpenMPI's settings for root and ASan
export TESSEL_CALIBRATION=none
fixed_calibration "$tmp/cal.txt"
echo "cache_bytes = 4194304" >>"$tmp/cal.txt"
if TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n 2 --oversubscribe --bind-to none "$tessel" plan \
  --calibrate "$tmp/cal.txt" >"$tmp/cal.out" 2>&1; then
  ok "mpirun -n 2 tessel plan --calibrate: $(tail -1 "$tmp/cal.out")"
else
  bad "mpirun -n 2 tessel plan --calibrate failed: $(tail -3 "$tmp/cal.out")"
fi
grep -q "^kernel.matmul = 1e11" "$tmp/cal.txt" && ok "the file's other lines kept" || bad "the file's other lines lost"
for k in latency_s bytes_per_s cached_bytes_per_s busy_s busy_after_s step_wait_s; do
  v=$(sed -n "s/^allreduce\.procs2\.$k = \([^ ]*\) .*/\1/p" "$tmp/cal.txt")
  if /usr/bin/python3 -c "import sys; sys.exit(not float('$v') > 0)" 2>/dev/null; then ok "allreduce.procs2.$k = $v"
  else bad "allreduce.procs2.$k: '$v' (not a positive number)"; fi
done
grep -q "^step_overhead.procs2_s = " "$tmp/cal.txt" && ok "step_overhead.procs2_s written" || bad "no step_overhead.procs2_s"
ms() { # ms FILE: inspect's predicted step of the MLP on data=2 over 2 processes
  timeout -k 5 60 "$tessel" inspect --model mlp --mesh data=2 --processes 2 --device "$1" --json 2>>"$tmp/insp.err" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"]["step_ms"])' 2>/dev/null || echo nan
}
grep -v "^allreduce.procs2.cached_bytes_per_s" "$tmp/cal.txt" >"$tmp/nocached.txt"
a=$(ms "$tmp/cal.txt") b=$(ms "$tmp/nocached.txt")
if /usr/bin/python3 -c "import sys; a, b = $a, $b; sys.exit(not (a > 0 and b > 0 and a != b))" 2>/dev/null; then
  ok "inspect --processes 2 reads it; the in-cache beta prices the MLP's collectives: $b -> $a ms"
else
  bad "inspect --processes 2: $a ms with the in-cache beta, $b without ($(tail -2 "$tmp/insp.err"))"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
