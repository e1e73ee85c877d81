#!/usr/bin/env bash
# ab_convnet.sh BUILD_A BUILD_B [bench_convnet_step flags (default --model resnet20 --steps 10 --warmup 3)]
# Interleaved A/B of the ResNet training step: BUILD_A/bench_convnet_step and
# BUILD_B/bench_convnet_step alternate (A B A B ...) for $ROUNDS rounds
# (default 3) per amp in $AMPS (default "none bf16"), $THREADS threads
# (default 2), under nice. Prints each run (median ms, process CPU ms per
# step, final loss, the load average) and per side and amp the median of the
# runs' medians, wall and CPU, and the least step over all runs (wall, CPU);
# the final losses must agree when B claims the
# same bits. On a loaded host THREADS=1 and the CPU column track the code
# better than wall times (bench_convnet_step's note).
set -euo pipefail
a="$1" b="$2"
shift 2
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(--model resnet20 --steps 10 --warmup 3)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for amp in ${AMPS:-none bf16}; do
  for r in $(seq 1 "${ROUNDS:-3}"); do
    for side in A B; do
      dir="$a"
      [ "$side" = B ] && dir="$b"
      line="$(TESSEL_NUM_THREADS="${THREADS:-2}" nice "$dir/bench_convnet_step" --threads "${THREADS:-2}" --amp "$amp" "${flags[@]}" 2>/dev/null |
        grep '^RESULT')"
      ms="$(grep -o ' median_ms=[^ ]*' <<<"$line" | cut -d= -f2)"
      cpu="$(grep -o 'cpu_median_ms=[^ ]*' <<<"$line" | cut -d= -f2)"
      loss="$(grep -o 'final_loss=[^ ]*' <<<"$line" | cut -d= -f2)"
      mn="$(grep -o ' min_ms=[^ ]*' <<<"$line" | cut -d= -f2)"
      cmn="$(grep -o 'cpu_min_ms=[^ ]*' <<<"$line" | cut -d= -f2)"
      echo "$amp $side round $r: median_ms=$ms cpu_ms=$cpu min_ms=$mn cpu_min_ms=$cmn final_loss=$loss load=$(cut -d' ' -f1 /proc/loadavg)"
      echo "$amp $side $ms $cpu $mn $cmn" >>"$tmp/all"
    done
  done
done
/usr/bin/python3 - "$tmp/all" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    amp, side, *v = line.split()
    runs.setdefault((amp, side), []).append(tuple(map(float, v)))
for amp in dict.fromkeys(k[0] for k in runs):
    med = {s: [statistics.median(v[i] for v in runs[(amp, s)]) for i in (0, 1)] for s in "AB"}
    (a, ac), (b, bc) = med["A"], med["B"]
    print(f"{amp}: median of medians A {a:.1f} ms, B {b:.1f} ms, B/A {b / a:.3f}; "
          f"CPU A {ac:.1f} ms, B {bc:.1f} ms, B/A {bc / ac:.3f}")
    least = {s: [min(v[i] for v in runs[(amp, s)]) for i in (2, 3)] for s in "AB"}
    (a, ac), (b, bc) = least["A"], least["B"]
    print(f"{amp}: least step A {a:.1f} ms, B {b:.1f} ms, B/A {b / a:.3f}; "
          f"least CPU A {ac:.1f} ms, B {bc:.1f} ms, B/A {bc / ac:.3f}")
PY
