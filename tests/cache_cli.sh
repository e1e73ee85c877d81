#!/usr/bin/env bash
# cache_cli.sh BUILD_DIR — observability through the CLI, with two processes:
# `tessel train` with TESSEL_CACHE_DIR compiles in the first process and
# loads every program from the cache in the second (PersistentCacheHit > 0,
# no UncachedCompile, no CompileTime) with the same losses; --metrics writes
# JSON with the PyTorch/XLA names and prints the short report; --trace
# writes valid Chrome trace JSON with one track per device (tid = device id,
# 2 devices with TESSEL_CPU_DEVICES=2); a corrupted entry is reported once
# and recompiled; `tessel inspect` prints the shardings, collectives and
# per-device memory without training.
set -u
build="${1:?usage: cache_cli.sh BUILD_DIR}"
tessel="$build/tessel"
py=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
export TESSEL_NUM_THREADS=2
cache="$tmp/cache"
train() { # train NAME [extra flags...]
  local name="$1"
  shift
  local rc=0
  TESSEL_CACHE_DIR="$cache" "$tessel" train --model mlp --steps 3 --epochs 1 --eval-batch 2500 \
    --log-json "$tmp/$name.log" --metrics "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq 0 ]; then ok "train $name exits 0"; else bad "train $name exit $rc: $(tail -5 "$tmp/$name.err")"; fi
}
# counter NAME FILE -> value (0 when absent)
counter() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[2])); print(d["counters"].get(sys.argv[1],0))' "$1" "$2" 2>/dev/null || echo "ERR"; }
# same_losses A B: the step losses of two --log-json files agree (1e-6 relative)
same_losses() {
  "$py" - "$1" "$2" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:3])
assert len(a) == len(b) and a, (a, b)
assert all(abs(x - y) <= 1e-6 * max(1.0, abs(x)) for x, y in zip(a, b)), (a, b)
PY
}
samples() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[2])); print(d["metrics"].get(sys.argv[1],{}).get("count",0))' "$1" "$2" 2>/dev/null || echo "ERR"; }

# ---- first process: compiles and fills the cache ----
train first --trace "$tmp/first.trace.json"
n_entries=$(ls "$cache"/*.tsc 2>/dev/null | wc -l)
if [ "$n_entries" -ge 1 ]; then ok "cache dir holds $n_entries entries"; else bad "no entries in $cache"; fi
u1=$(counter UncachedCompile "$tmp/first.json")
m1=$(counter PersistentCacheMiss "$tmp/first.json")
if [ "$u1" != ERR ] && [ "$u1" -ge 1 ] && [ "$m1" = "$u1" ]; then ok "first run: $u1 compiles, $m1 persistent misses"
else bad "first run: UncachedCompile=$u1 PersistentCacheMiss=$m1"; fi
e1=$(samples ExecuteTime "$tmp/first.json")
if [ "$e1" != ERR ] && [ "$e1" -ge 3 ]; then ok "ExecuteTime has $e1 samples"; else bad "ExecuteTime samples: $e1"; fi
t1=$(samples TransferToDeviceTime "$tmp/first.json")
if [ "$t1" != ERR ] && [ "$t1" -ge 3 ]; then ok "TransferToDeviceTime has $t1 samples"; else bad "TransferToDeviceTime samples: $t1"; fi
if grep -q "CompileTime" "$tmp/first.out"; then ok "short report printed"; else bad "no short report in stdout: $(tail -5 "$tmp/first.out")"; fi

# ---- second process: loads instead of compiling ----
train second
h2=$(counter PersistentCacheHit "$tmp/second.json")
u2=$(counter UncachedCompile "$tmp/second.json")
c2=$(samples CompileTime "$tmp/second.json")
if [ "$h2" != ERR ] && [ "$h2" = "$u1" ] && [ "$u2" = 0 ] && [ "$c2" = 0 ]; then
  ok "second run: $h2 persistent hits, no compile"
else bad "second run: PersistentCacheHit=$h2 (want $u1) UncachedCompile=$u2 CompileTime samples=$c2"; fi
if same_losses "$tmp/first.log" "$tmp/second.log"; then ok "same losses from the cached programs"
else bad "losses differ: $(head -3 "$tmp/first.log") vs $(head -3 "$tmp/second.log")"; fi

# ---- a corrupted entry: warned once, recompiled ----
for f in "$cache"/*.tsc; do # the middle byte inverted (writing 0xff over a 0xff changed nothing)
  size=$(stat -c %s "$f")
  byte=$(od -An -tu1 -j $((size / 2)) -N1 "$f" | tr -d ' ')
  printf "\\$(printf %o $((255 - byte)))" | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
done
train third
d3=$(counter PersistentCacheDiscarded "$tmp/third.json")
u3=$(counter UncachedCompile "$tmp/third.json")
if [ "$d3" = "$n_entries" ] && [ "$u3" = "$n_entries" ]; then ok "corrupt entries discarded ($d3) and recompiled"
else bad "corrupt entries: PersistentCacheDiscarded=$d3 UncachedCompile=$u3 (want $n_entries)"; fi
w3=$(grep -c "compile cache entry" "$tmp/third.err")
if [ "$w3" = 1 ]; then ok "one warning on stderr"; else bad "$w3 warnings: $(cat "$tmp/third.err")"; fi
if same_losses "$tmp/first.log" "$tmp/third.log"; then ok "same losses after recompiling"; else bad "losses differ after recompiling"; fi

# ---- traces: valid JSON, one track per device ----
check_trace() { # FILE NDEV
  "$py" - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ndev = int(sys.argv[2])
ev = d["traceEvents"]
x = [e for e in ev if e.get("ph") == "X"]
assert x, "no complete events"
for e in x:
    assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0, e
tids = sorted({e["tid"] for e in x if e["pid"] == 0})
assert tids == list(range(ndev)), "device tracks %s, want 0..%d" % (tids, ndev - 1)
named = sorted(e["tid"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0)
assert named == tids, "track names %s" % named
host = [e for e in x if e["pid"] == 1]
assert any(e["cat"] == "compile" for e in host), "no compile event on the host track"
PY
}
if check_trace "$tmp/first.trace.json" 1; then ok "trace: valid JSON, one device track"; else bad "trace check failed"; fi
rc=0
TESSEL_CPU_DEVICES=2 "$tessel" train --model mlp --steps 2 --epochs 1 --eval-batch 2500 --trace "$tmp/two.trace.json" \
  >"$tmp/two.out" 2>"$tmp/two.err" || rc=$?
if [ "$rc" -eq 0 ] && check_trace "$tmp/two.trace.json" 2; then ok "trace with 2 devices: tracks 0 and 1"
else bad "2-device trace (exit $rc): $(tail -3 "$tmp/two.err")"; fi

# ---- inspect ----
rc=0
"$tessel" inspect --model mlp --batch 32 --mesh 2 --axis-names data --no-graph >"$tmp/inspect.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && grep -q "all-reduce" "$tmp/inspect.out" && grep -q "{devices=\[2" "$tmp/inspect.out" &&
   grep -q "peak arena" "$tmp/inspect.out"; then ok "inspect --mesh 2 shows shardings, collectives, memory"
else bad "inspect (exit $rc): $(head -20 "$tmp/inspect.out")"; fi
rc=0
"$tessel" inspect --model cnn --mesh 0 >/dev/null 2>"$tmp/inspect.err" || rc=$?
if [ "$rc" -eq 2 ] && grep -q -- "--mesh" "$tmp/inspect.err"; then ok "inspect --mesh 0 -> exit 2"; else bad "inspect --mesh 0 -> exit $rc"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
