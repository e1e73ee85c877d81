#!/usr/bin/env bash
# run_netlink.sh [BUILD_DIR (build/)] — how much of a shaped link tessel's
# transport uses (issue 17). Two namespace hosts (tests/netns.bash; needs
# root) with both ends of their link limited by tc tbf to each rate of $RATES,
# as bench/run_multihost.sh does. Per rate and mode (oneway, bidir,
# allreduce; see bench/net_link.c) it runs, ROUNDS times interleaved:
#   tcp    raw TCP between the hosts (netns_tcp: bench/tcp_link.py, one
#          connection, kernel defaults): what the link itself gives
#   net    bench_net_link: the same bytes through src/comm/net.c over MPI's
#          TCP transport (as in training), polling hard
#   net-p  the same while waiting as a collective worker does (-p)
#   net-s, net-p-s  with a thread spinning next to it (-s: a device computing)
# and prints per row the median of the rounds' medians, in ms and Mbit/s of
# one direction's bytes. BYTES (4718592, the CNN's fc1 gradient), REPS per
# run (10), ROUNDS (3), MODES, ROWS ("tcp net net-p").
# A/B: AB_BUILD=DIR adds, per net row, ROW-A from DIR's bench_net_link (e.g.
# a build of the previous commit), alternating with this build's in every
# round (every other round in reverse order). NET_ENV="VAR=VALUE ..." is given to this build's net rows only
# (e.g. OMPI_MCA_ parameters to try). VARIANTS="NAME:VAR=VALUE,VAR=VALUE ..." adds, per net row
# ROW, ROW+NAME: this build's bench_net_link with those variables (instead of NET_ENV), in the
# same rounds, e.g. VARIANTS="kbuf:OMPI_MCA_btl_tcp_sndbuf=0,OMPI_MCA_btl_tcp_rcvbuf=0 nopace:TESSEL_NET_PACE=0".
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$(cd "${1:-$here/../build}" && pwd)"
bin="$build/bench_net_link"
[ -x "$bin" ] || { echo "run_netlink.sh: no $bin (build first: scripts/build.sh build)" >&2; exit 2; }
rates=(${RATES:-1gbit})
modes=(${MODES:-oneway bidir allreduce})
rows=(${ROWS:-tcp net net-p})
bytes="${BYTES:-4718592}"
reps="${REPS:-10}"
if [ -n "${AB_BUILD:-}" ]; then
  [ -x "$AB_BUILD/bench_net_link" ] || { echo "run_netlink.sh: AB_BUILD=$AB_BUILD: no bench_net_link" >&2; exit 2; }
  for r in "${rows[@]}"; do [ "$r" = tcp ] || rows+=("$r-A"); done
fi
declare -A variant=() # NAME -> "VAR=VALUE VAR=VALUE"
base_rows=("${rows[@]}")
for v in ${VARIANTS:-}; do
  variant[${v%%:*}]="$(tr , ' ' <<<"${v#*:}")"
  for r in "${base_rows[@]}"; do case "$r" in tcp | *-A) ;; *) rows+=("$r+${v%%:*}") ;; esac; done
done
net_env=(${NET_ENV:-})
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

. "$here/../tests/netns.bash"
netns_start 2 run_netlink.sh # sets tmp and the traps

one() { # one ROW MODE: prints the RESULT line
  local row="$1" mode="$2" b="$bin" flags=() envs=("${net_env[@]}") v
  case "$row" in
    tcp) netns_tcp "$bytes" "$reps" "${mode/comm/allreduce}"; return ;; # comm: the bytes of allreduce
    *-A) b="$AB_BUILD/bench_net_link" envs=() ;;
    *+*) envs=(${variant[${row#*+}]}) row="${row%%+*}" ;;
  esac
  case "$row" in *-p*) flags+=(-p) ;; esac
  case "$row" in *-s*) flags+=(-s) ;; esac
  local xs=()
  for v in "${envs[@]}"; do xs+=(-x "${v%%=*}"); done
  timeout -k 10 120 env "${envs[@]}" "${mpi[@]}" "${xs[@]}" --hostfile "$tmp/hostfile2" -n 2 "$b" -b "$bytes" -r "$reps" -m "$mode" "${flags[@]}" |
    grep '^RESULT ' | paste -sd' ' # -m pass: its second line (the large one's time) joins the first
  netns_kill
}

: >"$tmp/results"
for r in "${rates[@]}"; do
  netns_rate "$r" || { echo "run_netlink.sh: tc tbf at $r failed" >&2; exit 1; }
  for mode in "${modes[@]}"; do
    for i in $(seq "${ROUNDS:-3}"); do
      order=("${rows[@]}") # every other round in reverse: the first run of a round was measured
      [ $((i % 2)) = 0 ] && for j in "${!rows[@]}"; do order[j]="${rows[${#rows[@]} - 1 - j]}"; done # 1.6 ms slower (A/A)
      for row in "${order[@]}"; do
        out=$(one "$row" "$mode") || true
        echo "$r $mode $row $i ${out#RESULT }" | tee -a "$tmp/results" >&2
      done
    done
  done
done
/usr/bin/python3 - "$tmp/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, mode, row, i, *kv = line.split()
    d = dict(x.split("=", 1) for x in kv if "=" in x)
    if "median_ms" in d:
        runs.setdefault((r, mode, row), []).append(
            (float(d["median_ms"]), float(d["mbps"]), float(d.get("large_median_ms", "nan"))))
# -m pass: ms is the small all-reduce's, large_ms the large one's (same runs), ratio small/large per round
print(f"{'link':7} {'mode':9} {'row':7} {'ms':>7} {'Mbit/s':>7}  rounds (ms)")
for (r, mode, row), v in runs.items():
    line = (f"{r:7} {mode:9} {row:7} {statistics.median(x[0] for x in v):7.2f} "
            f"{statistics.median(x[1] for x in v):7.0f}  {' '.join(f'{x[0]:.1f}' for x in v)}")
    if mode == "pass":
        line += (f"  large_ms {statistics.median(x[2] for x in v):.2f} ({' '.join(f'{x[2]:.1f}' for x in v)})"
                 f"  small/large {statistics.median(x[0] / x[2] for x in v):.2f}")
    print(line)
PY
