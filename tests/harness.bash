# harness.bash — what the shell tests share (sourced, not a test itself):
# a scratch directory $tmp removed at exit, ok/bad that count checks for the
# closing "N passed, N failed" line each script prints, expect for the exit
# code and message of a `$tessel` run, and compare for the loss curves of
# --log-json logs written to $tmp/NAME.json.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

compare() { # compare REF NAME STEPS: NAME's loss curve follows REF's within 1e-4
  if /usr/bin/python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "loss" in r]
a, b, n = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert len(a) == n and len(b) == n, f"{len(a)} and {len(b)} steps logged, expected {n}"
worst = max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b))
print(f"  worst relative loss difference {worst:.3g}")
assert worst <= 1e-4, f"loss curves differ by {worst:.3g}"
PY
  then ok "$2 loss curve equals 1 device"; else bad "$2 loss curve differs from 1 device"; fi
}

# expect NAME CODE PATTERN ARGS...: $tessel ARGS (at most 60 s) exits CODE with PATTERN in stderr
expect() {
  local name="$1" code="$2" pattern="$3"
  shift 3
  local rc=0
  timeout -k 5 60 "$tessel" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -eq "$code" ] && { [ -z "$pattern" ] || grep -q -- "$pattern" "$tmp/$name.err"; }; then ok "$name: exit $code, '$pattern'"
  else bad "$name: exit $rc (expected $code and '$pattern'): $(head -c 400 "$tmp/$name.err")"; fi
}

# small_test_set [N]: sets $fm to a Fashion-MNIST folder in $tmp with the whole training set and
# only the first N (1000) test images, both uncompressed (every run then skips inflating 30 MB).
# For tests that train a few steps and check training losses or messages, never the test accuracy:
# evaluating all 10000 test images at the end of each run was most of their time (a ResNet-20 run
# on 2 steps: 80%). The evaluation itself still runs, on the same mesh, over N images.
small_test_set() {
  fm="$tmp/fm"
  /usr/bin/python3 - /usr/share/datasets/fashion-mnist "$fm" "${1:-1000}" <<'PY'
import gzip, os, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst)
for split in ("train", "t10k"):
    for kind, hdr, row in (("images-idx3-ubyte", 16, 784), ("labels-idx1-ubyte", 8, 1)):
        data = bytearray(gzip.open(f"{src}/{split}-{kind}.gz").read())
        if split == "t10k":
            assert n <= struct.unpack_from(">I", data, 4)[0], f"{n} test images asked for"
            struct.pack_into(">I", data, 4, n)
            data = data[:hdr + n * row]
        open(f"{dst}/{split}-{kind}", "wb").write(data)
PY
}

# need_mpirun: a test that runs mpirun ends failed (exit 1) where there is none,
# never passing silently; and sets what OpenMPI wants as root (containers, CI;
# harmless otherwise) and, in sanitizer builds, leaves OpenMPI's own
# allocations at exit unreported (tests/CMakeLists.txt; memory errors are
# still caught).
need_mpirun() {
  if ! command -v mpirun >/dev/null; then
    bad "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"
    echo "$passed passed, $failed failed"
    exit 1
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}

# fixed_calibration FILE [CPU]: writes a calibration file of fixed rates (not this machine's
# measurement) that the prediction tests start from and append their own keys to: one core's
# matmul at 1e11 FLOP/s and elementwise kernels at 1e10 B/s, 1 us per kernel and per 1-device
# step, 2 threads on 2 cores; calibration.cpu CPU (default "test").
fixed_calibration() {
  cat >"$1" <<EOF
name = a fixed test calibration
calibration.cpu = ${2:-test}
calibration.threads = 2
cores = 2
kernel.matmul = 1e11
kernel.elementwise = 1e10
op_overhead_s = 1e-6
step_overhead.1_s = 1e-6
EOF
}
