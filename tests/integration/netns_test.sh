#!/usr/bin/env bash
# Multi-host test: three network namespaces joined by veth pairs to a bridge
# that lives in a fourth namespace (no address outside them is ever used).
# A seed (nexar-seed) runs in host 1; one worker per host joins it.
#   netns_test.sh <nexar-seed> <mesh_worker> [loss-percent] [4|6]
# With a loss percentage, nft drops that share of UDP datagrams entering
# host 2 (this kernel has no tc netem). With 6, the hosts also have IPv6
# addresses fd00:6e78::1..3 and the seed serves on the IPv6 one: every worker
# must advertise (and use) its IPv6 address. Needs root; skips (exit 77) otherwise.
set -u
. "$(dirname "$0")/netns_lib.sh"
SEED=$1 WORKER=$2 LOSS=${3:-0} FAMILY=${4:-4}
P=nx$$
BR=${P}br
cleanup() {
  nx_netns_down
  [ -n "${SEEDPID:-}" ] && kill $SEEDPID 2>/dev/null
  rm -f /tmp/$P.*
}
trap cleanup EXIT
if [ "$FAMILY" = 6 ]; then
  nx_netns_up "$P" 10.77.0 fd00:6e78:
  LISTEN='[fd00:6e78::1]:0' SEEDLOG=info # its log names each worker's advertised address
else
  nx_netns_up "$P" 10.77.0
  LISTEN=10.77.0.1:0 SEEDLOG=
fi
if [ "$LOSS" != 0 ]; then
  ip netns exec ${P}h2 nft -f - <<NFT || { echo "FAIL: nft"; exit 1; }
table inet nxloss {
  chain in { type filter hook input priority 0; meta l4proto udp numgen random mod 100 < $LOSS drop; }
}
NFT
fi
export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
ip netns exec ${P}h1 env NEXAR_DEBUG=$SEEDLOG "$SEED" --listen "$LISTEN" --world-size 3 --once \
  --timeout-ms 60000 > /tmp/$P.seed 2>&1 &
SEEDPID=$!
for _ in $(seq 100); do grep -q NEXAR_SEED_ADDR= /tmp/$P.seed && break; sleep 0.1; done
ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' /tmp/$P.seed)
[ -n "$ADDR" ] || { echo "FAIL: seed did not start"; cat /tmp/$P.seed; exit 1; }
pids=()
for i in 1 2 3; do
  ip netns exec ${P}h$i env NEXAR_SEED_ADDR=$ADDR NEXAR_WORLD_SIZE=3 \
    NEXAR_CONNECT_TIMEOUT_MS=30000 NEXAR_COLLECTIVE_TIMEOUT_MS=30000 \
    timeout 120 "$WORKER" > /tmp/$P.w$i 2>&1 &
  pids+=($!)
done
rc=0
for i in 0 1 2; do wait ${pids[$i]} || rc=1; done
cat /tmp/$P.w1 /tmp/$P.w2 /tmp/$P.w3
wait $SEEDPID || { echo "seed failed"; cat /tmp/$P.seed; rc=1; }
if [ "$FAMILY" = 6 ]; then
  n=$(grep -c 'seed: \[fd00:6e78::[123]\]:[0-9]* joined' /tmp/$P.seed)
  [ "$n" = 3 ] || { echo "FAIL: $n of 3 workers advertised an IPv6 address"; cat /tmp/$P.seed; rc=1; }
fi
[ "$LOSS" != 0 ] && ip netns exec ${P}h2 nft list ruleset | grep -o 'drop' >/dev/null
exit $rc
