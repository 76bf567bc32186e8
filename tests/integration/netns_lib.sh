# Shared by the network-namespace tests: NX_HOSTS hosts (default three)
# ${P}h1..N, each with an
# eth0 at SUBNET.1..3/24, joined by a bridge living in a fourth namespace
# ${P}br, so no address outside these namespaces is ever used. With a third
# argument (an IPv6 /64 prefix, e.g. fd00:6e78:), eth0 also gets PREFIX:N/64
# (nodad: usable at once, no duplicate address detection delay).
#   source netns_lib.sh; nx_netns_up <prefix> <subnet, e.g. 10.77.0> [v6 prefix]
# nx_netns_up exits 77 (ctest SKIP) without root or namespaces.
nx_netns_up() {
  P=$1
  BR=${P}br
  local net=$2 v6=${3:-} i
  if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
    echo "SKIP: needs root and iproute2"
    exit 77
  fi
  ip netns add "$BR" || { echo "SKIP: cannot create namespaces"; exit 77; }
  ip -n "$BR" link add br0 type bridge && ip -n "$BR" link set br0 up
  for i in $(seq "${NX_HOSTS:-3}"); do
    ip netns add "${P}h$i"
    ip link add "${P}v$i" type veth peer name "${P}b$i"
    ip link set "${P}v$i" netns "${P}h$i"
    ip link set "${P}b$i" netns "$BR"
    ip -n "$BR" link set "${P}b$i" master br0
    ip -n "$BR" link set "${P}b$i" up
    ip -n "${P}h$i" link set "${P}v$i" name eth0
    ip -n "${P}h$i" addr add "$net.$i/24" dev eth0
    [ -z "$v6" ] || ip -n "${P}h$i" addr add "$v6:$i/64" dev eth0 nodad
    ip -n "${P}h$i" link set eth0 up
    ip -n "${P}h$i" link set lo up
  done
}

nx_netns_down() {
  local i
  for i in $(seq "${NX_HOSTS:-3}"); do ip netns del "${P}h$i" 2>/dev/null; done
  ip netns del "$BR" 2>/dev/null
  return 0
}

# nx_netns_session <prefix> <subnet>: nx_netns_up, plus an EXIT trap that
# kills every pid the caller adds to PIDS and removes the namespaces and the
# /tmp/<prefix>.* scratch files.
nx_netns_session() {
  PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; nx_netns_down; rm -f /tmp/$P.*' EXIT
  nx_netns_up "$1" "$2"
}
