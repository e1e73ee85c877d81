#!/usr/bin/env bash
# calib_spread.sh A_BUILD [B_BUILD] — how much `tessel plan --calibrate` moves
# between invocations (issue 16: the step predictions are only as steady as
# the calibration). Runs A's and B's calibration alternately (A B A B ...,
# ROUNDS pairs, default 4: a shared machine's load drifts, so both sides see
# the same spells) into scratch files and prints, per side, each run's value
# of every key matching KEYS (default: the memory-bound kernel classes; ALL=1:
# every measured key: kernel classes, parallel and shared efficiency, the
# overheads and the all-reduce terms) and its max / min over the runs, then
# per side the median max / min over the keys and the keys above 1.25, and
# each calibration's wall and CPU time. KEEP=DIR keeps
# the calibration files there. A_ARGS / B_ARGS: more arguments of each side's
# tessel plan --calibrate (the same build twice: B_ARGS="--rounds 6" ...). Each calibration takes 15-80 s (quiet /
# loaded). The load average is printed before and after.
set -uo pipefail
a="${1:?usage: calib_spread.sh A_BUILD [B_BUILD]}"
b="${2:-}"
n=${ROUNDS:-4}
keys=${KEYS:-'^kernel\.(elementwise|broadcast|reduce|optimizer|pool|broadcast_rows|transcendental) ='}
[ "${ALL:-0}" = 1 ] && keys='^(kernel\.|parallel_efficiency|shared_efficiency|step_overhead|op_overhead|allreduce)'
tmp="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp"/* "$KEEP"/; rm -rf "$tmp"' EXIT
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
sides=(A)
[ -n "$b" ] && sides+=(B)
for ((r = 0; r < n; r++)); do
  for s in "${sides[@]}"; do
    dir=$a
    [ "$s" = B ] && dir=$b
    args=${A_ARGS:-}
    [ "$s" = B ] && args=${B_ARGS:-}
    # shellcheck disable=SC2086 # A_ARGS / B_ARGS: words, e.g. "--rounds 6"
    /usr/bin/time -f "%U %S" -o "$tmp/$s.$r.time" "$dir/tessel" plan --calibrate "$tmp/$s.$r.txt" $args >"$tmp/$s.$r.out" ||
      { echo "calib_spread.sh: $s calibration failed" >&2; exit 1; }
    echo "$s $r: $(grep -o 'calibrated in [0-9.]* s' "$tmp/$s.$r.out") ($(awk '{printf "%.1f", $1 + $2}' "$tmp/$s.$r.time") s CPU), load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
/usr/bin/python3 - "$tmp" "$n" "$keys" "${sides[@]}" <<'PY'
import os, re, sys
tmp, n, keys, sides = sys.argv[1], int(sys.argv[2]), re.compile(sys.argv[3]), sys.argv[4:]
for s in sides:
    runs = [open(os.path.join(tmp, "%s.%d.txt" % (s, r))).read().split("\n") for r in range(n)]
    vals = {}
    for lines in runs:
        for l in lines:
            if keys.search(l):
                k, v = l.split("=", 1)
                vals.setdefault(k.strip(), []).append(float(v.split("#")[0]))
    ratios = []
    for k, v in vals.items():
        ratios.append((max(v) / min(v), k))
        print("%s %-24s %s  max/min %.2f" % (s, k, " ".join("%.3g" % x for x in v), max(v) / min(v)))
    if ratios:
        r = sorted(x for x, _ in ratios)
        print("%s: %d keys, median max/min %.2f, above 1.25: %d (%s)" % (s, len(r), r[len(r) // 2],
              sum(x > 1.25 for x in r), " ".join("%s %.2f" % (k, x) for x, k in sorted(ratios, reverse=True) if x > 1.25)))
PY
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
