#!/usr/bin/env bash
# predict_calib.sh BUILD_DIR — the prediction reads the calibration's terms
# for devices sharing the cores (issue 16), both measured by tessel plan
# --calibrate: `allreduce.N.busy_s`, what a collective between kernels takes
# on N devices beyond the back-to-back alpha, and `shared_efficiency.N`, the
# speed of N devices taking turns on the cores over their share of one core's.
# On a fixed, hand-written calibration (nothing measured, deterministic):
#  - a file without the key (written before it existed) is still read;
#  - with allreduce.4.busy_s = 1 ms, the predicted step of data=4 and of
#    data=2,model=2 (4 devices: the 4-device entry) grows by at least 1 ms,
#    in `tessel plan --device` and in `tessel inspect` reading the cache;
#    data=2 (the 2-device entry) and 1 device do not change;
#  - with shared_efficiency.4 = 0.5, data=4's predicted compute doubles
#    exactly, data=2's does not change;
#  - with op_overhead.4_s = 1 ms (the per-kernel cost measured with 4 devices
#    in the process), data=4's predicted compute grows by 1 ms per kernel at
#    least, data=2's does not change;
#  - with allreduce.4.async_s = 1 ms, data=4's step (asynchronous gradient
#    all-reduces) grows by at least 1 ms; those take it instead of busy_s;
#    async_s equal to its probe's alpha (2 log2 4 latency steps) adds nothing;
#  - with kernel.matmul.bytes_per_s, the MLP's 16-row matmuls on 8 devices cost their bytes too;
#  - with kernel.elementwise.cached and cache_bytes, the MLP's small copies on 2x2 cost less;
#  - with allreduce.4.busy_long_s = 10 ms after 1 ns of compute (its
#    busy_long_after_s), data=4's step grows by 10 ms at least (its blocking
#    collectives), after 1e9 s by nothing; data=2 and collectives on the
#    worker do not change; one key without the other is an error;
#  - TESSEL_ASYNC_COLLECTIVES=0: no collective is asynchronous, async_s unused;
#  - collectives marked asynchronous of at most 8 MiB run in line (blocking),
#    as the runtime runs them: data=4's step is longer by half its compute at
#    least than with TESSEL_COMM_INLINE_BYTES=0 (on the worker, overlapped);
#    over an axis across hosts (devices_per_host) the limit is 64 KiB;
#  - with kernel.broadcast.operand_s = 1 ns, ResNet-20's NCHW compute (batch-norm
#    kernels: several broadcast operands) grows by 1 ms at least, the MLP's
#    (one bias per kernel) does not;
#  - with kernel.CONV.weight_bytes_per_s (forward, data and filter gradient), each convolution
#    kind's op grows by its weights' bytes, the others do not; the solver's plan does not change;
#  - inspect's compute per op name adds up to its compute and kernel count;
#  - a bad key or value is an error naming it;
#  - bench/run_autoshard.sh's REPLAY with SET="key=value" replays a log's
#    rows with that calibration key replaced (a 1-row log: a slower
#    optimizer class lengthens the MLP's step; the same value changes
#    nothing; a SET without a number is an error).
set -u
build="${1:?usage: predict_calib.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, expect
export TESSEL_NUM_THREADS=2 TESSEL_CALIBRATION=none
cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
fixed_calibration "$tmp/old.txt" "${cpu:-unknown CPU}"
cat >>"$tmp/old.txt" <<EOF
allreduce.2.bytes_per_s = 1e10
allreduce.2.latency_s = 1e-5
step_overhead.2_s = 1e-5
allreduce.4.bytes_per_s = 5e9
allreduce.4.latency_s = 2e-5
step_overhead.4_s = 2e-5
allreduce.8.bytes_per_s = 2e9
allreduce.8.latency_s = 4e-5
step_overhead.8_s = 4e-5
EOF
{ cat "$tmp/old.txt"; echo "allreduce.4.busy_s = 1e-3   # 1 ms per collective on 4 devices"; } >"$tmp/new.txt"

step_ms() { # [FIELD] JSON on stdin -> predicted.FIELD (step_ms)
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["predicted"][sys.argv[1]])' "${1:-step_ms}"
}
plan_ms() { # plan_ms CALIBRATION MESH [FIELD [MODEL [LAYOUT]]]
  timeout -k 5 60 "$tessel" plan --model "${4:-mlp}" ${5:+--layout "$5"} --mesh "$2" --device "$1" --json 2>"$tmp/plan.err" | step_ms "${3:-step_ms}"
}
inspect_ms() { # inspect_ms CALIBRATION MESH: inspect reads the cache (this machine's key)
  local out
  out=$(TESSEL_CALIBRATION="$1" timeout -k 5 120 "$tessel" inspect --model mlp --mesh "$2" --json 2>"$tmp/insp.err")
  grep -q "\"costs\":\"calibration $1\"" <<<"$out" || { echo "not-used"; return; }
  step_ms <<<"$out"
}
grows() { # grows NAME OLD NEW: NEW >= OLD + 1 ms
  if /usr/bin/python3 -c "import sys; sys.exit(not (float('$3') >= float('$2') + 0.999))" 2>/dev/null; then
    ok "$1: $2 -> $3 ms with allreduce.4.busy_s = 1 ms"
  else bad "$1: $2 -> $3 ms: the collective wait is not applied"; fi
}
same() { # same NAME OLD NEW
  if [ -n "$2" ] && [ "$2" = "$3" ]; then ok "$1: $2 ms either way"; else bad "$1: '$2' vs '$3' ms"; fi
}

for mesh in data=4 data=2,model=2; do
  o=$(plan_ms "$tmp/old.txt" "$mesh") n=$(plan_ms "$tmp/new.txt" "$mesh")
  [ -n "$o" ] && ok "plan $mesh reads a calibration without allreduce.N.busy_s" || bad "plan $mesh: $(cat "$tmp/plan.err")"
  grows "plan $mesh" "$o" "$n"
done
same "plan data=2 (its own entry, not 4's)" "$(plan_ms "$tmp/old.txt" data=2)" "$(plan_ms "$tmp/new.txt" data=2)"
same "plan data=1" "$(plan_ms "$tmp/old.txt" data=1)" "$(plan_ms "$tmp/new.txt" data=1)"
o=$(inspect_ms "$tmp/old.txt" data=4) n=$(inspect_ms "$tmp/new.txt" data=4)
grows "inspect data=4 (the calibration cache)" "$o" "$n"

# an asynchronous collective's time on the collective worker (allreduce.4.async_s, the
# workers of devices sharing the cores): data=4's gradient all-reduces start
# asynchronously, one after another on the worker, so the step grows by at least 1 ms; it replaces busy_s for them (with busy_s = 1 ms,
# async_s = 1 ns makes the step shorter); data=2 (its own entry) does not change
{ cat "$tmp/old.txt"; echo "allreduce.4.async_s = 1e-3"; } >"$tmp/async.txt"
{ cat "$tmp/new.txt"; echo "allreduce.4.async_s = 1e-9"; } >"$tmp/async0.txt"
o=$(plan_ms "$tmp/old.txt" data=4) n=$(plan_ms "$tmp/async.txt" data=4)
if /usr/bin/python3 -c "import sys; sys.exit(not float('$n') >= float('$o') + 0.999)" 2>/dev/null; then
  ok "plan data=4: $o -> $n ms with allreduce.4.async_s = 1 ms"
else bad "plan data=4: '$o' -> '$n' ms with allreduce.4.async_s = 1 ms (expected 1 ms more at least)"; fi
b=$(plan_ms "$tmp/new.txt" data=4) a=$(plan_ms "$tmp/async0.txt" data=4)
if /usr/bin/python3 -c "import sys; sys.exit(not float('$a') + 0.999 <= float('$b'))" 2>/dev/null; then
  ok "plan data=4: busy_s = 1 ms: $b -> $a ms with async_s = 1 ns (asynchronous ones take async_s)"
else bad "plan data=4: busy_s = 1 ms: '$b' -> '$a' ms with async_s = 1 ns (expected 1 ms less at least)"; fi
# async_s is the probe's whole time per collective, its 1-element all-reduce's alpha (2 log2 4
# steps of allreduce.4.latency_s = 2e-5 s: 80 us) included; the prediction adds every collective's
# alpha itself, so only what is beyond it is a wait: async_s = 80 us waits as long as 1 ns
# (charged twice until stop 35: MLP 2x2 by hand 1.30x its measured step)
{ cat "$tmp/old.txt"; echo "allreduce.4.async_s = 8e-5"; } >"$tmp/async_alpha.txt"
{ cat "$tmp/old.txt"; echo "allreduce.4.async_s = 1e-9"; } >"$tmp/async_1ns.txt"
same "plan data=4: async_s equal to its probe's alpha waits nothing more" "$(plan_ms "$tmp/async_1ns.txt" data=4)" \
  "$(plan_ms "$tmp/async_alpha.txt" data=4)"
same "plan data=2 with allreduce.4.async_s (its own entry)" "$(plan_ms "$tmp/old.txt" data=2)" "$(plan_ms "$tmp/async.txt" data=2)"
# TESSEL_ASYNC_COLLECTIVES=0: the compiler starts none asynchronously, so async_s is not charged
same "plan data=4, TESSEL_ASYNC_COLLECTIVES=0: async_s unused" "$(TESSEL_ASYNC_COLLECTIVES=0 plan_ms "$tmp/old.txt" data=4)" \
  "$(TESSEL_ASYNC_COLLECTIVES=0 plan_ms "$tmp/async.txt" data=4)"

# the longer wait of devices that compute more between collectives (allreduce.N.busy_long_s after
# allreduce.N.busy_long_after_s of compute, scaled down below it): with 10 ms after 1 ns of compute,
# every collective data=4's MLP runs in line (blocking) waits 10 ms; after 1e9 s of compute it waits
# about nothing more; data=2 (its own entry) and on the worker (TESSEL_COMM_INLINE_BYTES=0) nothing;
# one key without the other is an error naming both
{ cat "$tmp/old.txt"; echo "allreduce.4.busy_long_s = 1e-2"; echo "allreduce.4.busy_long_after_s = 1e-9"; } >"$tmp/long.txt"
{ cat "$tmp/old.txt"; echo "allreduce.4.busy_long_s = 1e-2"; echo "allreduce.4.busy_long_after_s = 1e9"; } >"$tmp/long0.txt"
o=$(plan_ms "$tmp/old.txt" data=4) n=$(plan_ms "$tmp/long.txt" data=4) z=$(plan_ms "$tmp/long0.txt" data=4)
if /usr/bin/python3 -c "import sys; sys.exit(not (float('$n') >= float('$o') + 9.99 and float('$o') <= float('$z') < float('$o') + 0.01))" 2>/dev/null; then
  ok "plan data=4: $o -> $n ms with allreduce.4.busy_long_s = 10 ms after 1 ns of compute; $z after 1e9 s"
else bad "plan data=4: '$o' -> '$n' ms with busy_long_s = 10 ms after 1 ns (expected 10 ms more at least), '$z' after 1e9 s (expected '$o')"; fi
same "plan data=2 with allreduce.4.busy_long_s (its own entry)" "$(plan_ms "$tmp/old.txt" data=2)" "$(plan_ms "$tmp/long.txt" data=2)"
same "plan data=4 on the worker (TESSEL_COMM_INLINE_BYTES=0): busy_long_s unused" \
  "$(TESSEL_COMM_INLINE_BYTES=0 plan_ms "$tmp/old.txt" data=4)" "$(TESSEL_COMM_INLINE_BYTES=0 plan_ms "$tmp/long.txt" data=4)"
{ cat "$tmp/old.txt"; echo "allreduce.4.busy_long_s = 1e-2"; } >"$tmp/long_half.txt"
expect long_half 2 "allreduce.4.busy_long_s and allreduce.4.busy_long_after_s go together" plan --model mlp \
  --mesh data=4 --device "$tmp/long_half.txt"

# collectives marked asynchronous run in line on the device thread (blocking) up to 8 MiB, as
# the runtime runs them (the MLP's all are smaller): nothing hides behind compute, so with
# async_s = 1 ms the step is longer by half the compute at least than with
# TESSEL_COMM_INLINE_BYTES=0 (every one on the worker, beside the kernels); the compute is the same
o=$(TESSEL_COMM_INLINE_BYTES=0 plan_ms "$tmp/async.txt" data=4) n=$(plan_ms "$tmp/async.txt" data=4)
c=$(plan_ms "$tmp/async.txt" data=4 compute_ms)
if /usr/bin/python3 -c "import sys; sys.exit(not float('$n') >= float('$o') + float('$c') / 2)" 2>/dev/null; then
  ok "plan data=4: $o ms on the worker -> $n ms in line (compute $c ms)"
else bad "plan data=4: '$o' ms on the worker -> '$n' ms in line (expected half the compute '$c' ms more at least)"; fi
same "plan data=4 compute in line or not" "$(TESSEL_COMM_INLINE_BYTES=0 plan_ms "$tmp/async.txt" data=4 compute_ms)" "$c"
# across hosts (devices_per_host = 2: data=4's axis spans 2 hosts) only those of at most 64 KiB
# run in line, as comm/ runs them: the MLP's larger gradients go to the worker, so the step is
# the one with TESSEL_COMM_INLINE_BYTES=65536 and shorter than with 8 MiB
{ cat "$tmp/async.txt"; echo "devices_per_host = 2"; } >"$tmp/hosts.txt"
h=$(plan_ms "$tmp/hosts.txt" data=4) h64=$(TESSEL_COMM_INLINE_BYTES=65536 plan_ms "$tmp/hosts.txt" data=4)
h8=$(TESSEL_COMM_INLINE_BYTES=8388608 plan_ms "$tmp/hosts.txt" data=4)
same "plan data=4 across 2 hosts: the 64 KiB in-line limit" "$h" "$h64"
if /usr/bin/python3 -c "import sys; sys.exit(not float('$h') < float('$h8'))" 2>/dev/null; then
  ok "plan data=4 across 2 hosts: $h ms, $h8 ms with 8 MiB in line"
else bad "plan data=4 across 2 hosts: '$h' ms, '$h8' ms with 8 MiB in line (expected shorter)"; fi

# devices taking turns on the cores at half their share's speed: compute twice as long
{ cat "$tmp/old.txt"; echo "shared_efficiency.4 = 0.5"; } >"$tmp/eff.txt"
o=$(plan_ms "$tmp/old.txt" data=4 compute_ms) n=$(plan_ms "$tmp/eff.txt" data=4 compute_ms)
if /usr/bin/python3 -c "import sys; sys.exit(not abs(float('$n') / float('$o') - 2) < 1e-5)  # JSON: 6 digits" 2>/dev/null; then
  ok "plan data=4: compute $o -> $n ms with shared_efficiency.4 = 0.5"
else bad "plan data=4: compute $o -> $n ms with shared_efficiency.4 = 0.5 (expected twice)"; fi
same "plan data=2 compute (its own entry)" "$(plan_ms "$tmp/old.txt" data=2 compute_ms)" "$(plan_ms "$tmp/eff.txt" data=2 compute_ms)"

# the per-kernel cost measured with 4 devices in the process: every kernel of data=4 pays it
{ cat "$tmp/old.txt"; echo "op_overhead.4_s = 1e-3"; } >"$tmp/opo.txt"
o=$(plan_ms "$tmp/old.txt" data=4 compute_ms) n=$(plan_ms "$tmp/opo.txt" data=4 compute_ms)
TESSEL_CALIBRATION="$tmp/opo.txt" timeout -k 5 120 "$tessel" inspect --model mlp --mesh data=4 --no-graph --no-program >"$tmp/opo.out" 2>&1
k=$(sed -n 's/.*compute by kernel class (\([0-9]*\) kernels).*/\1/p' "$tmp/opo.out")
if [ -n "$k" ] && /usr/bin/python3 -c "import sys; sys.exit(not float('$n') - float('$o') >= 0.99 * $k)" 2>/dev/null; then
  ok "plan data=4: compute $o -> $n ms with op_overhead.4_s = 1 ms ($k kernels)"
else bad "plan data=4: compute $o -> $n ms with op_overhead.4_s = 1 ms ('$k' kernels: expected 1 ms each more)"; fi
same "plan data=2 compute (its own entry)" "$(plan_ms "$tmp/old.txt" data=2 compute_ms)" "$(plan_ms "$tmp/opo.txt" data=2 compute_ms)"

# a fused kernel's broadcast operands beyond the first (kernel.broadcast.operand_s: a batch norm's
# mean, scale, shift): ResNet-20's NCHW batch-norm kernels cost more, the MLP's (one bias each) do
# not (nor NHWC's, tessel's default since stop 34: there the terms run along the last dim, as a bias)
{ cat "$tmp/old.txt"; echo "kernel.broadcast.operand_s = 1e-9"; } >"$tmp/bop.txt"
o=$(plan_ms "$tmp/old.txt" data=1 compute_ms resnet20 nchw) n=$(plan_ms "$tmp/bop.txt" data=1 compute_ms resnet20 nchw)
if /usr/bin/python3 -c "import sys; sys.exit(not float('$n') >= float('$o') + 1)" 2>/dev/null; then
  ok "plan resnet20: compute $o -> $n ms with kernel.broadcast.operand_s = 1 ns"
else bad "plan resnet20: compute '$o' -> '$n' ms with kernel.broadcast.operand_s = 1 ns (expected 1 ms more at least)"; fi
same "plan mlp data=4 compute with kernel.broadcast.operand_s" "$(plan_ms "$tmp/old.txt" data=4 compute_ms)" \
  "$(plan_ms "$tmp/bop.txt" data=4 compute_ms)"
# kernel.matmul.bytes_per_s: a dot_general moving more than 256 KiB also streams its operands and
# result (the MLP on 8 devices: 16-row products, ~6 MB a step per device, 1e9 B/s per core shared
# by 4 devices a core: ~24 ms); absent, nothing changes (files written before it)
{ cat "$tmp/old.txt"; echo "kernel.matmul.bytes_per_s = 1e9"; } >"$tmp/dotb.txt"
o=$(plan_ms "$tmp/old.txt" data=8 compute_ms) n=$(plan_ms "$tmp/dotb.txt" data=8 compute_ms)
if /usr/bin/python3 -c "import sys; sys.exit(not float('$n') >= float('$o') + 10)" 2>/dev/null; then
  ok "plan mlp data=8: compute $o -> $n ms with kernel.matmul.bytes_per_s = 1e9"
else bad "plan mlp data=8: compute '$o' -> '$n' ms with kernel.matmul.bytes_per_s = 1e9 (expected 10 ms more at least)"; fi
# kernel.CLASS.cached with cache_bytes: memory-bound kernels moving at most cache_bytes per device
# run at the in-cache rate (the MLP on 2x2: its combiner's slices and concatenate of one 1.3 MB
# all-reduced buffer, its 0.5-3.2 MB parameter updates); without cache_bytes the rate is unused
{ cat "$tmp/old.txt"; echo "kernel.elementwise.cached = 1e12"; echo "cache_bytes = 4194304"; } >"$tmp/cached.txt"
{ cat "$tmp/old.txt"; echo "kernel.elementwise.cached = 1e12"; } >"$tmp/cached0.txt"
o=$(plan_ms "$tmp/old.txt" data=2,model=2 compute_ms) n=$(plan_ms "$tmp/cached.txt" data=2,model=2 compute_ms)
if /usr/bin/python3 -c "import sys; sys.exit(not float('$n') <= float('$o') - 0.2)" 2>/dev/null; then
  ok "plan mlp data=2,model=2: compute $o -> $n ms with kernel.elementwise.cached"
else bad "plan mlp data=2,model=2: compute '$o' -> '$n' ms with kernel.elementwise.cached (expected 0.2 ms less at least)"; fi
same "plan mlp data=2,model=2 compute: kernel.elementwise.cached without cache_bytes" "$o" \
  "$(plan_ms "$tmp/cached0.txt" data=2,model=2 compute_ms)"

# kernel.CONV.weight_bytes_per_s: each convolution kind (forward, data gradient, filter gradient)
# also moves its weight (its filter gradient): ResNet-18's 1-device step, per op name, grows in
# that kind's op alone by its convolutions' weights, 11.2 M floats (44.7 MB), over 1e9 B/s per core
# on the 2 threads' share (22.3 ms); the others and the MLP (no convolution) do not change. The
# solver leaves it out (autoshard.h autoshard_conv_weight_s says why): ResNet-20's auto plan on 2
# devices is the same at 1 us a weight byte
conv_ops() { # conv_ops CALIBRATION: "conv2d conv2d_bwd_data conv2d_bwd_filter" ms (resnet18, 1 device)
  TESSEL_CALIBRATION="$1" timeout -k 5 120 "$tessel" inspect --model resnet18 --json 2>"$tmp/conv.err" |
    /usr/bin/python3 -c 'import json, sys; o = json.load(sys.stdin)["ops"]
print(" ".join("%.6f" % o[k]["ms"] for k in ("conv2d", "conv2d_bwd_data", "conv2d_bwd_filter")))'
}
c0=$(conv_ops "$tmp/old.txt")
kinds=(conv conv_bwd_data conv_bwd_filter)
for i in 0 1 2; do
  { cat "$tmp/old.txt"; echo "kernel.${kinds[$i]}.weight_bytes_per_s = 1e9"; } >"$tmp/cw$i.txt"
  c1=$(conv_ops "$tmp/cw$i.txt")
  if /usr/bin/python3 - "$i" "$c0" "$c1" <<'PY'
import sys
i, a, b = int(sys.argv[1]), [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
ok = all((22.0 <= b[k] - a[k] <= 22.6) if k == i else b[k] == a[k] for k in range(3))
sys.exit(not ok)
PY
  then ok "inspect resnet18: kernel.${kinds[$i]}.weight_bytes_per_s = 1e9 adds 22.3 ms to its op alone ($c0 -> $c1)"
  else bad "inspect resnet18: kernel.${kinds[$i]}.weight_bytes_per_s = 1e9: '$c0' -> '$c1' ms (expected +22.0..22.6 in op $i alone: $(cat "$tmp/conv.err"))"; fi
done
same "plan mlp data=4 with kernel.conv.weight_bytes_per_s" "$(plan_ms "$tmp/old.txt" data=4)" "$(plan_ms "$tmp/cw0.txt" data=4)"
{ cat "$tmp/old.txt"; for k in "${kinds[@]}"; do echo "kernel.$k.weight_bytes_per_s = 1e6"; done; } >"$tmp/cwslow.txt"
conv_plan() { # conv_plan CALIBRATION: ResNet-20's auto-sharded shardings on a=2
  TESSEL_CALIBRATION="$1" timeout -k 5 120 "$tessel" inspect --model resnet20 --mesh a=2 --auto-shard --json 2>"$tmp/conv.err" |
    /usr/bin/python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["shardings"], sort_keys=True))'
}
p0=$(conv_plan "$tmp/old.txt") p1=$(conv_plan "$tmp/cwslow.txt")
if [ -n "$p0" ] && [ "$p0" = "$p1" ]; then
  ok "auto-shard resnet20 a=2: the same plan when moving a conv weight costs 1 us a byte (the solver leaves the term out)"
else bad "auto-shard resnet20 a=2: the plan changed with kernel.CONV.weight_bytes_per_s: $(cat "$tmp/conv.err")"; fi

# inspect's compute per op name (the names a trace gives kernels: bench/predict_ops.sh) adds up
# to the compute, its kernel counts to the kernels, and names the matmuls
TESSEL_CALIBRATION="$tmp/old.txt" timeout -k 5 120 "$tessel" inspect --model mlp --mesh data=4 --json >"$tmp/ops.json" 2>&1
TESSEL_CALIBRATION="$tmp/old.txt" timeout -k 5 120 "$tessel" inspect --model mlp --mesh data=4 --no-graph --no-program >"$tmp/ops.txt" 2>&1
if /usr/bin/python3 - "$tmp/ops.json" "$tmp/ops.txt" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1])); ops = d["ops"]
kernels = int(re.search(r"compute by kernel class \((\d+) kernels\)", open(sys.argv[2]).read()).group(1))
total = sum(o["ms"] for o in ops.values())
sys.exit(not (abs(total / d["predicted"]["compute_ms"] - 1) < 1e-4 and sum(o["count"] for o in ops.values()) == kernels
              and ops["dot_general"]["count"] > 0))
PY
then ok "inspect: the compute per op name adds up to the compute and the kernels"
else bad "inspect: ops $(head -c 300 "$tmp/ops.json")"; fi

# a bad key or value: an error naming it
sed 's/^allreduce.4.busy_s/allreduce.3.busy_s/' "$tmp/new.txt" >"$tmp/bad3.txt"
expect badn 2 "unknown key 'allreduce.3.busy_s'" plan --model mlp --mesh data=4 --device "$tmp/bad3.txt"
sed 's/^allreduce.4.busy_s = 1e-3/allreduce.4.busy_s = -1/' "$tmp/new.txt" >"$tmp/badv.txt"
expect badv 2 "allreduce.4.busy_s = '-1' is not a positive number" plan --model mlp --mesh data=4 --device "$tmp/badv.txt"
sed 's/^shared_efficiency.4/shared_efficiency.5/' "$tmp/eff.txt" >"$tmp/bade.txt"
expect bade 2 "unknown key 'shared_efficiency.5'" plan --model mlp --mesh data=4 --device "$tmp/bade.txt"
sed 's/^kernel.broadcast.operand_s = 1e-9/kernel.broadcast.operand_s = 0/' "$tmp/bop.txt" >"$tmp/bado.txt"
expect bado 2 "kernel.broadcast.operand_s = '0' is not a positive number" plan --model mlp --mesh data=4 --device "$tmp/bado.txt"
sed 's/^allreduce.4.async_s/allreduce.3.async_s/' "$tmp/async.txt" >"$tmp/bada.txt"
expect bada 2 "unknown key 'allreduce.3.async_s'" plan --model mlp --mesh data=4 --device "$tmp/bada.txt"


# bench/run_autoshard.sh REPLAY=LOG with SET="key=value": the log's calibration
# with that key replaced (the rows' sensitivity to one term): a 1-row log on
# the fixed calibration; kernel.optimizer = 1e8 B/s makes the MLP's update
# (8 MiB of weights, its Adam moments) take 0.1 s and more
{ echo "load at start: 0.00 0.00 0.00 (2 cores)"; sed 's/^/  /' "$tmp/old.txt"
  echo "model     mesh   plan    meas_ms   pred_ms pred/meas"
  echo "mlp       1      hand       2.00      2.00      1.00"; } >"$tmp/replay.log"
replay_now() { # replay_now [SET]: the row's re-predicted step (now_ms)
  SET="${1:-}" timeout -k 5 60 /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../bench/replay_autoshard.py" \
    "$tmp/replay.log" "$build" 2>&1 | tee "$tmp/replay.out" | awk '$1 == "mlp" {print $7}'
}
r0=$(replay_now) r1=$(replay_now "kernel.optimizer=1e8")
if grep -q "^SET kernel.optimizer (unset) -> 1e8$" "$tmp/replay.out" &&
  /usr/bin/python3 -c "import sys; sys.exit(not (float('$r1') >= float('$r0') + 100))" 2>/dev/null; then
  ok "replay SET=kernel.optimizer=1e8: the MLP's step $r0 -> $r1 ms"
else bad "replay SET: '$r0' -> '$r1' ms: $(tail -2 "$tmp/replay.out")"; fi
r2=$(replay_now "kernel.matmul=1e11")
if grep -q "^SET kernel.matmul 1e11 -> 1e11$" "$tmp/replay.out" && [ -n "$r0" ] && [ "$r2" = "$r0" ]; then
  ok "replay SET of a key to its own value: the same step ($r2 ms)"
else bad "replay SET kernel.matmul=1e11: '$r2' against '$r0' ms: $(tail -2 "$tmp/replay.out")"; fi
if ! SET="kernel.matmul" /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../bench/replay_autoshard.py" "$tmp/replay.log" \
  "$build" >"$tmp/replay.out" 2>&1 && grep -q "SET: 'kernel.matmul' is not key=number" "$tmp/replay.out"; then
  ok "replay SET without a number: an error naming it"
else bad "replay SET=kernel.matmul: $(tail -2 "$tmp/replay.out")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
