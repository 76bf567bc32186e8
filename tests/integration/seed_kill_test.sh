#!/usr/bin/env bash
# A joiner killed at random moments of formation never costs the others more
# than a heartbeat timeout. Per case: nexar-seed (--once) and 3 mesh_worker
# processes; after a seeded random delay one of them is SIGKILLed (or
# SIGSTOPped, then SIGKILLed 300 ms later) and a replacement is started, as a
# launcher would. Every survivor must either succeed (exit 0) or fail within
# BOUND_MS (4 s: heartbeat timeout 1 s + interval + sanitizer slack) of the
# SIGKILL, and never with NEXAR_ERR_TIMEOUT (the connect
# timeout is 20 s, the heartbeat timeout 1 s).
#   seed_kill_test.sh <nexar-seed> <mesh_worker> [cases] [rng seed]
set -u
SEED=$1 WORKER=$2
CASES=${3:-12}
RANDOM=${4:-4242}
N=3
BOUND_MS=${BOUND_MS:-4000}
MAX_DELAY_MS=${MAX_DELAY_MS:-900}
. "$(dirname "$0")/proc_lib.sh"
proc_scratch nxkill
export NEXAR_CONNECT_TIMEOUT_MS=20000
export NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1000
export NEXAR_WORLD_SIZE=$N
now_ms() { echo $(($(date +%s%N) / 1000000)); }
FAILED=0 worst=0 nfail=0 nok=0
for c in $(seq 1 "$CASES"); do
  delay=$((RANDOM % MAX_DELAY_MS))
  victim=$((RANDOM % N))
  mode=kill
  [ $((c % 3)) -eq 0 ] && mode=stop
  rm -f "$D"/*
  : >"$D/seed"
  "$SEED" --listen 127.0.0.1:0 --world-size $N --once --timeout-ms 30000 >"$D/seed" 2>"$D/seed.err" &
  seedpid=$!
  PIDS=($seedpid)
  for _ in $(seq 100); do grep -q NEXAR_SEED_ADDR "$D/seed" && break; sleep 0.05; done
  export NEXAR_SEED_ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$D/seed")
  W=()
  for i in $(seq 0 $((N - 1))); do
    "$WORKER" >"$D/w$i" 2>&1 &
    W+=($!)
  done
  PIDS+=("${W[@]}")
  sleep "$(printf '0.%03d' "$delay")"
  vp=${W[$victim]}
  if [ "$mode" = stop ]; then
    kill -STOP "$vp" 2>/dev/null
    sleep 0.3
  fi
  kill -KILL "$vp" 2>/dev/null
  tkill=$(now_ms)
  "$WORKER" >"$D/wr" 2>&1 &
  PIDS+=($!)
  declare -A tend=()
  left=$((N - 1))
  while [ $left -gt 0 ]; do # note each survivor's end (or failure) to within 10 ms
    for i in $(seq 0 $((N - 1))); do
      [ "$i" -eq "$victim" ] || [ -n "${tend[$i]:-}" ] && continue
      # its failure line counts (a sanitizer's exit-time leak scan does not)
      kill -0 "${W[$i]}" 2>/dev/null && ! grep -q "^mesh_worker:" "$D/w$i" && continue
      tend[$i]=$(now_ms)
      left=$((left - 1))
    done
    sleep 0.01
  done
  for i in $(seq 0 $((N - 1))); do
    [ "$i" -eq "$victim" ] && continue
    wait "${W[$i]}"
    rc=$?
    echo "$rc" >"$D/end$i"
    el=$((tend[$i] - tkill))
    if [ "$rc" -ne 0 ]; then
      nfail=$((nfail + 1))
      [ $el -gt $worst ] && worst=$el
      why=$(grep mesh_worker "$D/w$i" | head -1)
      [ -n "${VERBOSE:-}" ] && echo "  worker $i: rc $rc after $el ms: $why"
      if [ $el -gt "$BOUND_MS" ]; then
        echo "FAIL case $c ($mode at ${delay} ms): worker $i failed $el ms after the kill: $why"
        FAILED=1
      fi
      if echo "$why" | grep -q TIMEOUT; then
        echo "FAIL case $c ($mode at ${delay} ms): worker $i timed out: $why"
        FAILED=1
      fi
    else
      nok=$((nok + 1))
    fi
  done
  unset tend
  echo "case $c: $mode worker $victim at ${delay} ms: survivors $(for i in $(seq 0 $((N - 1))); do [ $i -ne $victim ] && printf '%s ' "$(cut -d' ' -f1 "$D/end$i")"; done)| $(grep -ho 'rank [0-9]* ([^)]*) was lost[^)]*' "$D"/w* 2>/dev/null | head -1)"
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
done 2>/dev/null
echo "survivors: $nok succeeded, $nfail failed, slowest failure $worst ms after the kill (bound $BOUND_MS)"
[ $FAILED -eq 0 ] && echo PASSED || echo FAILED
exit $FAILED
