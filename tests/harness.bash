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
