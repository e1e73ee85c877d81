# harness.bash — what the shell tests share (sourced, not a test itself):
# a scratch directory $tmp removed at exit, and ok/bad that count checks for
# the closing "N passed, N failed" line each script prints.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
