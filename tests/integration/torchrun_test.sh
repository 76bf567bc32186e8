#!/usr/bin/env bash
# nexar_init_from_env in torchrun mode: MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE,
# rank 0 hosting the seed, every rank getting exactly RANK; then the same with
# TORCHELASTIC_USE_AGENT_STORE=True (seed on MASTER_PORT + 1, the agent's port
# left alone); and the refusal without NEXAR_CLUSTER_TOKEN.
#   torchrun_test.sh <mesh_worker>
set -u
W=$1
. "$(dirname "$0")/port_lib.sh"
port=$(free_port 9) || exit 1
run_world() { # env... : three ranks, all must succeed
  local pids=() rc=0
  for r in 0 1 2; do
    env "$@" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=3 \
      timeout 60 "$W" > "/tmp/nxtr$$.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for r in 0 1 2; do
    grep -q "rank $r of 3 ok" "/tmp/nxtr$$.$r" || { echo "FAIL: rank $r"; cat "/tmp/nxtr$$.$r"; rc=1; }
  done
  rm -f /tmp/nxtr$$.*
  return $rc
}
tok=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
run_world NEXAR_CLUSTER_TOKEN="$tok" || exit 1
echo "ok torchrun variables"
port=$((port + 7))
# torchrun's agent already listens on MASTER_PORT: the seed must take +1
python3 -c "import socket,time;s=socket.socket();s.bind(('127.0.0.1',$port));s.listen();time.sleep(30)" &
agent=$!
sleep 0.3
run_world NEXAR_CLUSTER_TOKEN="$tok" TORCHELASTIC_USE_AGENT_STORE=True || { kill $agent; exit 1; }
kill $agent 2>/dev/null
echo "ok TORCHELASTIC_USE_AGENT_STORE (seed on MASTER_PORT + 1)"
out=$(env -u NEXAR_CLUSTER_TOKEN MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=1 \
  timeout 20 "$W" 2>&1)
if [ $? -eq 0 ] || ! grep -q NEXAR_CLUSTER_TOKEN <<<"$out"; then
  echo "FAIL: missing token not refused: $out"
  exit 1
fi
echo "ok missing token refused, naming the variable"
