#!/usr/bin/env bash
# Chaos soak, bounded in time: three network namespaces (veth + bridge), a seed
# in host 1 and one chaos_worker per host repeating allreduce, broadcast,
# allgather, reduce_scatter and barrier rounds for SECONDS, every result
# checked exactly. Impairment: nft drops 2% of the UDP datagrams entering
# host 2 (this kernel has no tc netem), and every rank runs with the
# transport's test-only hook
#   NEXAR_TEST_IMPAIR=loss=1%,delay=2ms,jitter=1ms,reorder=1%,seed=7
# (seeded per host, so the three do not drop in lockstep).
#   chaos_test.sh <nexar-seed> <chaos_worker> [seconds, default 60]
# Needs root; skips (exit 77) otherwise.
set -u
. "$(dirname "$0")/netns_lib.sh"
SEED=$1 WORKER=$2 SECONDS_=${3:-60}
nx_netns_session nxc$$ 10.79.0
ip netns exec ${P}h2 nft -f - <<NFT || { echo "FAIL: nft"; exit 1; }
table inet nxchaos {
  chain in {
    type filter hook input priority 0;
    meta l4proto udp numgen random mod 100 < 2 counter drop;
  }
}
NFT
export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
ip netns exec ${P}h1 "$SEED" --listen 10.79.0.1:0 --world-size 3 --once --timeout-ms 60000 \
  >/tmp/$P.seed 2>&1 &
PIDS+=($!)
ADDR=""
for _ in $(seq 100); do
  ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' /tmp/$P.seed)
  [ -n "$ADDR" ] && break
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "FAIL: seed did not start"; cat /tmp/$P.seed; exit 1; }
T0=$(date +%s)
w=()
for i in 1 2 3; do
  ip netns exec ${P}h$i env NEXAR_SEED_ADDR=$ADDR NEXAR_WORLD_SIZE=3 NEXAR_RANK=$((i - 1)) \
    NEXAR_CONNECT_TIMEOUT_MS=30000 NEXAR_COLLECTIVE_TIMEOUT_MS=30000 \
    NEXAR_TEST_IMPAIR="loss=1%,delay=2ms,jitter=1ms,reorder=1%,seed=$((7 + i))" \
    CHAOS_SECONDS=$SECONDS_ timeout -s KILL $((SECONDS_ + 90)) "$WORKER" >/tmp/$P.w$i 2>&1 &
  w+=($!)
  PIDS+=($!)
done
rc=0
for i in 0 1 2; do wait ${w[$i]} || { echo "rank $i exited $?"; rc=1; }; done
cat /tmp/$P.w1 /tmp/$P.w2 /tmp/$P.w3
echo "chaos: $(( $(date +%s) - T0 )) s in all; nft on host 2:" \
  "$(ip netns exec ${P}h2 nft list ruleset | grep -o 'counter packets [0-9]*' | head -1) dropped"
[ $rc = 0 ] && echo "chaos: ok" || echo "chaos: FAILED"
exit $rc
