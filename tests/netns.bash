# netns.bash — hosts as network + UTS namespaces of this machine, for
# tests/multihost.sh and bench/run_multihost.sh (sourced, not a test itself).
#
#   netns_up N DIR   N hosts (namespaces, each with interface eth0, an address
#                    and its own hostname) on a bridge with a free /24 of
#                    10.213.0.0/16; writes DIR/rsh (mpirun's rsh agent: enters
#                    the host's namespace) and DIR/hostfileK (K = 2..N, one
#                    slot each). Sets hosts=(...), net (the CIDR), br, and
#                    mpi=(mpirun ... TCP only on $net). Returns non-zero with
#                    netns_error set when something cannot be created.
#                    NETNS_MTU=BYTES: the bridge's and links' MTU (default
#                    1500; 9000, jumbo frames, moved the 2-host CNN's steps
#                    by 0.3-1.6 ms at 1 Gbit/s, stop 38).
#   netns_rate RATE  limits both ends of hosts 0 and 1's links to RATE (tc's
#                    units, e.g. 1gbit) with a tbf of 1 ms of burst.
#   netns_tcp BYTES REPS MODE  raw TCP from host 0 to host 1
#                    (bench/tcp_link.py; MODE oneway, bidir or allreduce):
#                    prints its RESULT line (median_ms, mbps of one direction)
#   netns_kill       kills every process inside the hosts.
#   netns_down       kills them and removes everything netns_up created.
#   netns_start N WHO  for the benchmarks: makes tmp (a temporary directory),
#                    sets the traps that call netns_down and remove tmp on
#                    exit, then netns_up N "$tmp"; exits 2 naming WHO when
#                    the hosts cannot be created.
# Names start with tsh<pid of the sourcing shell> so runs never collide. The
# caller owns the trap that calls netns_down (on failure too), or lets
# netns_start set it.
netns_prefix="tsh$$"
hosts=()
netns_started=()
netns_error=""

netns_kill() {
  local h pid left
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    left=0
    for h in "${hosts[@]:-}"; do
      [ -n "$h" ] && [ -e "/var/run/netns/$h" ] || continue
      for pid in $(ip netns pids "$h" 2>/dev/null); do kill -9 "$pid" 2>/dev/null && left=1; done
    done
    [ "$left" = 0 ] && return 0
    sleep 0.2
  done
}

netns_rate() { # both ends of each host's link
  local i burst
  # a token bucket of 1 ms at the rate, at least 64 KiB (one GSO packet)
  burst=$(/usr/bin/python3 -c "
import re; m = re.fullmatch(r'(\d+(?:\.\d+)?)([kmg]?)bit', '$1'.lower()); assert m, 'rate $1: use e.g. 1gbit'
b = float(m.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2)] / 8
print(max(65536, int(b / 1000)))")
  for i in 0 1; do
    tc qdisc replace dev "${netns_prefix}v$i" root tbf rate "$1" burst "$burst" latency 100ms &&
      ip netns exec "${hosts[$i]}" tc qdisc replace dev eth0 root tbf rate "$1" burst "$burst" latency 100ms ||
      return 1
  done
}

netns_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

netns_tcp() {
  local spid rc
  ip netns exec "${hosts[1]}" timeout 60 /usr/bin/python3 "$netns_dir/../bench/tcp_link.py" serve 5599 &
  spid=$!
  ip netns exec "${hosts[0]}" timeout 60 /usr/bin/python3 "$netns_dir/../bench/tcp_link.py" run \
    "${net%.0/24}.11" 5599 "$@"
  rc=$?
  wait "$spid" || rc=1
  return $rc
}

netns_down() {
  local x
  netns_kill
  for x in "${netns_started[@]:-}"; do
    case "$x" in
      link:*) ip link del "${x#link:}" 2>/dev/null ;;
      ns:*) ip netns del "${x#ns:}" 2>/dev/null ;;
    esac
  done
  netns_started=()
}

netns_fail() { netns_error="$*"; return 1; }

netns_up() {
  local n="$1" dir="$2" i o h p="$netns_prefix" err="$2/ip.err"
  command -v mpirun >/dev/null || { netns_fail "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; return 1; }
  command -v ip >/dev/null && command -v unshare >/dev/null ||
    { netns_fail "ip or unshare not found (iproute2, util-linux)"; return 1; }
  [ "$(id -u)" -eq 0 ] || { netns_fail "not root (uid $(id -u))"; return 1; }
  sub=""
  for i in $(seq 0 40); do # a /24 no interface here uses
    o=$(((20 + $$ + i) % 230 + 20))
    ip -4 addr | grep -q " 10\.213\.$o\." || { sub="10.213.$o"; break; }
  done
  [ -n "$sub" ] || { netns_fail "no free /24 in 10.213.0.0/16"; return 1; }
  net="$sub.0/24"
  br="${p}br"
  ip link add "$br" type bridge 2>"$err" || { netns_fail "ip link add $br type bridge: $(cat "$err")"; return 1; }
  netns_started+=("link:$br")
  ip addr add "$sub.1/24" dev "$br" && ip link set "$br" up || { netns_fail "bridge $br address"; return 1; }
  [ -z "${NETNS_MTU:-}" ] || ip link set "$br" mtu "$NETNS_MTU" || { netns_fail "bridge $br mtu $NETNS_MTU"; return 1; }
  for i in $(seq 0 $((n - 1))); do
    h="${p}h$i"
    ip netns add "$h" 2>"$err" || { netns_fail "ip netns add $h: $(cat "$err")"; return 1; }
    netns_started+=("ns:$h")
    hosts+=("$h")
    ip link add "${p}v$i" type veth peer name eth0 netns "$h" 2>"$err" ||
      { netns_fail "veth for $h: $(cat "$err")"; return 1; }
    netns_started+=("link:${p}v$i")
    ip link set "${p}v$i" master "$br" up && ip -n "$h" addr add "$sub.$((10 + i))/24" dev eth0 &&
      ip -n "$h" link set eth0 up && ip -n "$h" link set lo up || { netns_fail "addresses of $h"; return 1; }
    [ -z "${NETNS_MTU:-}" ] || { ip link set "${p}v$i" mtu "$NETNS_MTU" && ip -n "$h" link set eth0 mtu "$NETNS_MTU"; } ||
      { netns_fail "mtu $NETNS_MTU of $h"; return 1; }
  done
  ip netns exec "${hosts[0]}" unshare --uts sh -c "hostname ${hosts[0]} && hostname" >"$err" 2>&1 &&
    [ "$(cat "$err")" = "${hosts[0]}" ] || { netns_fail "unshare --uts in ${hosts[0]}: $(cat "$err")"; return 1; }
  # mpirun's rsh agent: the "remote" host is a namespace, with its own hostname
  cat >"$dir/rsh" <<'AGENT'
#!/bin/sh
h="$1"
shift
exec ip netns exec "$h" unshare --uts sh -c "hostname $h && $*"
AGENT
  chmod +x "$dir/rsh"
  for i in $(seq 2 "$n"); do printf '%s slots=1\n' "${hosts[@]:0:$i}" >"$dir/hostfile$i"; done
  mpi=(mpirun --map-by node --bind-to none --mca plm_rsh_agent "$dir/rsh" --mca btl self,tcp
    --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net")
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  return 0
}

netns_start() {
  tmp="$(mktemp -d)"
  trap 'netns_down; rm -rf "$tmp"' EXIT
  trap 'exit 1' INT TERM HUP
  netns_up "$1" "$tmp" || { echo "$2: cannot create the namespace hosts: $netns_error" >&2; exit 2; }
}
