#!/usr/bin/env bash
# train_signals.sh BUILD_DIR — Ctrl-C and SIGTERM during `tessel train`
# (issue "Hostile inputs, signals and outputs", defect 4): the run stops after
# the current step, the JSON log holds only complete lines, metrics and trace
# are written, stdout says what was saved, exit 130 (SIGINT) / 143 (SIGTERM);
# a second Ctrl-C ends the process at once; under `mpirun -n 2` and `-n 3`
# (SIGTERM to every rank) all ranks stop after the same step (agreed one step
# behind: the step after the signal's).
# A small IDX dataset made here and many epochs: the run lasts until signalled.
set -u
build="${1:?usage: train_signals.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT # background runs too
export TESSEL_NUM_THREADS=1
unset TESSEL_TRACE

/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/make_idx.py" "$tmp/data" # 256 + 100 random 1x28x28 images
# job control: background runs get their own process group and, unlike the
# background jobs of a plain script, do not ignore SIGINT
set -m
long=(train --data-dir "$tmp/data" --batch 32 --eval-batch 100 --epochs 100000)

# wait_lines FILE N: until FILE has N lines (at most 60 s); false on timeout
wait_lines() {
  for _ in $(seq 300); do
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    sleep 0.2
  done
  return 1
}
# finish PID: waits for PID (at most 60 s, then kills it: rc -1); its exit code in $rc
finish() {
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
  rc=0
  if kill -0 "$1" 2>/dev/null; then
    kill -9 "$1"
    wait "$1"
    rc=-1
  else
    wait "$1" || rc=$?
  fi
}
# check_outputs NAME: complete JSON lines in the log, metrics and trace parse
check_outputs() {
  if /usr/bin/python3 - "$tmp/$1.jsonl" "$tmp/$1.m" "$tmp/$1.t" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), "the log ends mid-record: " + repr(text[-60:])
steps = [json.loads(l)["step"] for l in text.splitlines() if '"step"' in l]
assert steps == list(range(1, len(steps) + 1)) and steps, steps[-5:]
json.load(open(sys.argv[2]))["metrics"]
json.load(open(sys.argv[3]))["traceEvents"]
print(f"{len(steps)} steps logged")
PY
  then ok "$1: complete log lines, metrics and trace written"; else bad "$1: outputs"; fi
}

# ---- one process: SIGINT then SIGTERM ----
for sig in INT TERM; do
  want=$([ $sig = INT ] && echo 130 || echo 143)
  "$tessel" "${long[@]}" --log-json "$tmp/$sig.jsonl" --metrics "$tmp/$sig.m" --trace "$tmp/$sig.t" \
    >"$tmp/$sig.out" 2>"$tmp/$sig.err" &
  pid=$!
  if ! wait_lines "$tmp/$sig.jsonl" 3; then bad "SIG$sig: no log after 60 s"; kill -9 $pid; continue; fi
  kill -$sig $pid
  finish $pid
  if [ "$rc" -eq "$want" ]; then ok "SIG$sig: exit $want"; else bad "SIG$sig: exit $rc (expected $want): $(tail -3 "$tmp/$sig.err")"; fi
  if grep -q "interrupted by SIG$sig after step" "$tmp/$sig.out" && grep -q "^saved: --log-json" "$tmp/$sig.out"; then
    ok "SIG$sig: says where it stopped and what was saved"
  else bad "SIG$sig: stdout: $(tail -3 "$tmp/$sig.out")"; fi
  check_outputs $sig
done

# ---- with --save-dir, a signal saves a checkpoint of the last step done ----
"$tessel" "${long[@]}" --lr-schedule constant --warmup 0 --log-json "$tmp/ck.jsonl" --save-dir "$tmp/ck" \
  >"$tmp/ck.out" 2>"$tmp/ck.err" &
pid=$!
if wait_lines "$tmp/ck.jsonl" 3; then
  kill -INT $pid
  finish $pid
  last=$(grep -o '"step":[0-9]*' "$tmp/ck.jsonl" | tail -1 | cut -d: -f2)
  want=$(printf "step-%08d" "${last:-0}")
  if [ "$rc" -eq 130 ] && grep -q "checkpoint: step $last saved" "$tmp/ck.out" && [ "$(cat "$tmp/ck/latest" 2>/dev/null)" = "$want" ] &&
    "$tessel" ckpt inspect "$tmp/ck" >/dev/null 2>&1; then
    ok "SIGINT with --save-dir: checkpoint of step $last, latest -> $want, readable"
  else
    bad "SIGINT with --save-dir: exit $rc, last step $last, latest '$(cat "$tmp/ck/latest" 2>/dev/null)': $(tail -2 "$tmp/ck.out") $(tail -2 "$tmp/ck.err")"
  fi
else
  bad "--save-dir run: no log after 60 s"
  kill -9 $pid
fi

# ---- a second Ctrl-C exits at once ----
# The log is a FIFO nobody reads: opening it at the first step blocks, so the
# run cannot finish a step; the first SIGINT leaves it waiting, the second ends it.
mkfifo "$tmp/block"
"$tessel" "${long[@]}" --log-json "$tmp/block" >"$tmp/twice.out" 2>"$tmp/twice.err" &
pid=$!
wait_lines "$tmp/twice.out" 1 # the header: compiled, the first step about to run
sleep 2
kill -INT $pid
sleep 1
if kill -0 $pid 2>/dev/null; then ok "first SIGINT: the run goes on to the end of its step"
else bad "first SIGINT ended the process: $(cat "$tmp/twice.err")"; fi
kill -INT $pid
for _ in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then
  bad "second SIGINT: still running after 5 s"
  kill -9 $pid
else
  finish $pid
  if [ "$rc" -eq 130 ] && ! grep -q "^saved" "$tmp/twice.out"; then ok "second SIGINT: ended at once (exit 130)"
  else bad "second SIGINT: exit $rc, $(tail -2 "$tmp/twice.out")"; fi
fi

# ---- mpirun -n 2 and -n 3: SIGTERM to every rank (as Slurm's scancel and most schedulers
# deliver it), which agree to stop after the same step ----
# (Not to mpirun itself: OpenMPI 4.1 answers a SIGTERM of its own by tearing the
# job down, and the ranks' last output and files are lost about a third of the
# time on this machine; README, "Outputs and signals".)
if ! command -v mpirun >/dev/null; then
  bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
else
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  # 3: an agreement among more than two, one step behind; "3one": SIGTERM to
  # one rank only (the last), which the two others must follow
  for case in 2 3 3one; do
    np=${case%one}
    timeout -k 5 120 mpirun -n $np --oversubscribe --bind-to none "$tessel" "${long[@]}" --all-ranks \
      --log-json "$tmp/mpi$case.jsonl" --metrics "$tmp/mpi$case.m" --trace "$tmp/mpi$case.t" >"$tmp/mpi$case.out" 2>"$tmp/mpi$case.err" &
    pid=$!
    if wait_lines "$tmp/mpi$case.jsonl" 3; then
      ranks=$(pgrep -f "^$tessel train .*$tmp/mpi$case.jsonl" | tr '\n' ' ')
      [ "$case" = 3one ] && ranks=$(echo $ranks | awk '{print $NF}')
      kill -TERM $ranks
      finish $pid
      stops=$(grep -o "interrupted by SIGTERM after step [0-9]*" "$tmp/mpi$case.out" | sort -u)
      n=$(grep -c "interrupted by SIGTERM after step" "$tmp/mpi$case.out")
      if [ "$n" -eq $np ] && [ "$(echo "$stops" | wc -l)" -eq 1 ]; then ok "mpirun -n $np ($case): every rank stopped after the same step ($stops)"
      else bad "mpirun -n $np ($case): $n ranks stopped: $stops; rc $rc; stdout: $(grep -v "^epoch" "$tmp/mpi$case.out" | tail -3); stderr: $(tail -5 "$tmp/mpi$case.err")"; fi
      check_outputs mpi$case
    else
      bad "mpirun -n $np ($case): no log after 60 s: $(tail -5 "$tmp/mpi$case.err")"
      kill -9 $pid
    fi
  done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
