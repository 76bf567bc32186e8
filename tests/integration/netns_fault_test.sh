#!/usr/bin/env bash
# Link cut between hosts: three network namespaces joined by veth pairs to a
# bridge (in a fourth namespace), a seed in host 1 and one fault_worker per
# host running a loop of collectives or point-to-point. One host's link is set
# down in the middle of the loop (once inside the host, once on the bridge
# side); both survivors must fail with NEXAR_ERR_PEER_LOST within
# heartbeat_timeout_ms + one interval + slack (200/1000 ms: < BOUND_MS) while
# the collective timeout is 20 s, and name the cut rank in nexar_failed_ranks.
#   netns_fault_test.sh <nexar-seed> <fault_worker>
# Needs root; skips (exit 77) otherwise.
set -u
. "$(dirname "$0")/netns_lib.sh"
SEED=$1 WORKER=$2
BOUND_MS=${BOUND_MS:-2500}
nx_netns_session nxf$$ 10.78.0
export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1000
export NEXAR_COLLECTIVE_TIMEOUT_MS=20000 NEXAR_BARRIER_TIMEOUT_MS=20000
export NEXAR_RECOVERY_POLICY=manual NEXAR_CONNECT_TIMEOUT_MS=20000
FAILED=0

# run_cut NAME OP HOST(1..3) WHERE(host|bridge) [worker args...]
run_cut() {
  local name=$1 op=$2 victim_host=$3 where=$4
  shift 4
  echo "=== $name: $op, link of host $victim_host cut ($where side) mid-run"
  rm -f /tmp/$P.*
  for i in 1 2 3; do
    ip -n ${P}h$i link set eth0 up
    ip -n $BR link set ${P}b$i up
  done
  ip netns exec ${P}h1 "$SEED" --listen 10.78.0.1:0 --world-size 3 --once --timeout-ms 20000 \
    >/tmp/$P.seed 2>&1 &
  local seedpid=$!
  PIDS+=($seedpid)
  local addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/^NEXAR_SEED_ADDR=//p' /tmp/$P.seed)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "FAIL $name: seed did not start"; cat /tmp/$P.seed; FAILED=1; return; }
  local w=()
  for i in 1 2 3; do
    # ranks follow hosts: host i is rank i-1
    ip netns exec ${P}h$i env NEXAR_SEED_ADDR=$addr NEXAR_WORLD_SIZE=3 NEXAR_RANK=$((i - 1)) \
      timeout -s KILL 60 "$WORKER" "$op" --max-seconds 25 "$@" >/tmp/$P.w$i 2>&1 &
    w+=($!)
    PIDS+=($!)
  done
  local ready=0
  for _ in $(seq 200); do
    ready=$(cat /tmp/$P.w? 2>/dev/null | grep -c ': ready pid ')
    [ "$ready" = 3 ] && break
    sleep 0.1
  done
  if [ "$ready" != 3 ]; then
    echo "FAIL $name: only $ready of 3 ranks ready"; tail -n 5 /tmp/$P.w? /tmp/$P.seed
    FAILED=1; for p in "${w[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; return
  fi
  sleep 1
  local t_cut
  t_cut=$(date +%s%3N)
  if [ "$where" = host ]; then
    ip -n ${P}h$victim_host link set eth0 down
  else
    ip -n $BR link set ${P}b$victim_host down
  fi
  local dead=$((victim_host - 1))
  for i in 1 2 3; do
    [ $i = "$victim_host" ] && continue
    wait "${w[$((i - 1))]}"
    local rc=$? line code d failed
    line=$(grep -m1 ": op $op #.* failed with " /tmp/$P.w$i)
    if [ -z "$line" ]; then
      echo "FAIL $name: host $i (exit $rc) reported no failure"; sed 's/^/    /' /tmp/$P.w$i
      FAILED=1; continue
    fi
    code=$(sed -n 's/.* failed with \([A-Z_]*\) .*/\1/p' <<<"$line")
    d=$(( $(sed -n 's/.* at \([0-9]*\); .*/\1/p' <<<"$line") - t_cut ))
    failed=$(sed -n 's/.*: settled failed=\(\[[0-9,]*\]\).*/\1/p' /tmp/$P.w$i)
    if [ "$code" = PEER_LOST ] && [ "$d" -lt "$BOUND_MS" ] &&
      [[ "$failed" =~ ^\[([0-9]+,)*$dead(,[0-9]+)*\]$ ]]; then
      echo "ok   $name: host $i (rank $((i - 1))): $code $d ms after the cut (bound $BOUND_MS)," \
        "failed=$failed"
    else
      echo "FAIL $name: host $i (rank $((i - 1))): $code after $d ms, failed=$failed" \
        "(want PEER_LOST < $BOUND_MS ms naming rank $dead)"
      sed 's/^/    /' /tmp/$P.w$i
      FAILED=1
    fi
  done
  # the cut-off rank: whatever it saw, it must not hang or crash
  wait "${w[$((victim_host - 1))]}"
  local vrc=$?
  echo "     $name: cut-off host $victim_host exited $vrc:" \
    "$(grep -m1 'failed with' /tmp/$P.w$victim_host | cut -c1-160)"
  [ $vrc -ge 128 ] && { echo "FAIL $name: cut-off rank died of a signal"; FAILED=1; }
  kill $seedpid 2>/dev/null
  wait $seedpid 2>/dev/null
}

run_cut cut_host3_allreduce allreduce 3 host
run_cut cut_host2_p2p p2p 2 bridge
# 16 MiB allreduces: the cut lands mid-transfer on the bulk TCP streams
# (namespaces share a kernel: without NEXAR_BULK_TCP_LOCAL they would copy
# through memory as ranks of one host do)
export NEXAR_BULK_TCP_LOCAL=1
run_cut cut_host2_bulk_allreduce allreduce 2 host --count 4194304
unset NEXAR_BULK_TCP_LOCAL
exit $FAILED
