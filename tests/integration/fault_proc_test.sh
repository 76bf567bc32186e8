#!/usr/bin/env bash
# Failure detection between processes: a seed (nexar-seed) and N fault_worker
# processes on loopback. One rank is SIGKILLed or SIGSTOPped before or in the
# middle of a loop of allreduce, barrier, broadcast or point-to-point; every
# survivor must fail with NEXAR_ERR_PEER_LOST (p2p: or ABORTED, the revoke the
# loss causes, when its own exchange with the victim had finished) within heartbeat_timeout_ms +
# one interval + slack of the signal (heartbeat 200 ms / 1000 ms: < BOUND_MS),
# while the collective timeout is 20 s (so the timeout cannot explain it),
# report the victim in nexar_failed_ranks (in the communicator's numbering),
# and fail a later call at once.
# Signal SOCK is a fault of the bulk path alone: with NEXAR_BULK_TCP_LOCAL=1
# the large messages take TCP streams, and `ss -K` destroys the victim's TCP
# sockets mid-transfer (the process lives on); the survivors must declare it
# dead as for a QUIC transport error, at once (< SOCK_BOUND_MS, well under
# the heartbeat timeout).
#   fault_proc_test.sh <nexar-seed> <fault_worker> [case...]
set -u
SEED=$1 WORKER=$2
shift 2
ONLY=("$@")
BOUND_MS=${BOUND_MS:-2500}
SOCK_BOUND_MS=${SOCK_BOUND_MS:-600}
LATER_MS=${LATER_MS:-300} # sanitizer builds set more: the worker refills its buffers first
N=3
. "$(dirname "$0")/proc_lib.sh"
proc_scratch nxfault
export NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1000
export NEXAR_COLLECTIVE_TIMEOUT_MS=20000 NEXAR_BARRIER_TIMEOUT_MS=20000
export NEXAR_RECOVERY_POLICY=manual NEXAR_CONNECT_TIMEOUT_MS=20000
FAILED=0
SUMMARY=()

# run_case NAME OP SIGNAL WHEN VICTIM [worker args...]
#   WHEN: before (signal right after every rank is ready; the loop starts 500 ms
#   later) or mid (signal 1 s into the loop)
run_case() {
  local name=$1 op=$2 sig=$3 when=$4 victim=$5
  shift 5
  if [ ${#ONLY[@]} -gt 0 ] && [[ " ${ONLY[*]} " != *" $name "* ]]; then return; fi
  local split=0 args=("$@")
  [[ " ${args[*]} " == *" --split "* ]] && split=1
  [ "$when" = before ] && args+=(--start-delay-ms 500)
  echo "=== $name: $op, SIG$sig rank $victim $when the op"
  rm -f "$D"/*
  local bound=$BOUND_MS
  if [ "$sig" = SOCK ]; then
    if ! ss -K -tnH state established 'sport = :1' >/dev/null 2>&1; then
      echo "skip $name: ss -K unavailable (needs root and INET_DIAG_DESTROY)"; return
    fi
    export NEXAR_BULK_TCP_LOCAL=1
    bound=$SOCK_BOUND_MS
  fi
  "$SEED" --listen 127.0.0.1:0 --world-size $N --once --timeout-ms 20000 >"$D/seed" 2>&1 &
  local seedpid=$!
  PIDS+=($seedpid)
  local addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$D/seed")
    [ -n "$addr" ] && break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "FAIL $name: seed did not start"; cat "$D/seed"; FAILED=1; return
  fi
  local wrappers=()
  for ((i = 0; i < N; i++)); do
    NEXAR_SEED_ADDR=$addr NEXAR_WORLD_SIZE=$N NEXAR_RANK=$i \
      timeout -s KILL 60 "$WORKER" "$op" --max-seconds 25 "${args[@]}" >"$D/w$i" 2>&1 &
    wrappers+=($!)
    PIDS+=($!)
  done
  local ready=0
  for _ in $(seq 200); do
    ready=$(cat "$D"/w* 2>/dev/null | grep -c ': ready pid ')
    [ "$ready" = $N ] && break
    sleep 0.1
  done
  if [ "$ready" != $N ]; then
    echo "FAIL $name: only $ready of $N ranks became ready"; tail -n 5 "$D"/w* "$D/seed"
    FAILED=1
    for p in "${wrappers[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    return
  fi
  local vpid
  vpid=$(sed -n 's/^rank [0-9]*: ready pid \([0-9]*\) .*/\1/p' "$D/w$victim")
  PIDS+=($vpid)
  [ "$when" = mid ] && sleep 1
  local t_kill
  t_kill=$(date +%s%3N)
  if [ "$sig" = SOCK ]; then
    local port
    for port in $(ss -tnpH state established | grep "pid=$vpid," |
      awk '{split($3, a, ":"); print a[length(a)]}'); do
      ss -K -tnH state established "sport = :$port" >/dev/null
    done
    unset NEXAR_BULK_TCP_LOCAL
  else
    kill -"$sig" "$vpid"
  fi
  # survivors
  local want_dead=$victim
  [ $split = 1 ] && want_dead=$((N - 1 - victim))
  for ((i = 0; i < N; i++)); do
    [ $i = "$victim" ] && continue
    wait "${wrappers[$i]}"
    local rc=$? line later d code failed
    line=$(grep -m1 ": op $op #.* failed with " "$D/w$i")
    later=$(grep -m1 ": later op " "$D/w$i")
    if [ -z "$line" ]; then
      echo "FAIL $name: rank $i (exit $rc) reported no failure:"; sed 's/^/    /' "$D/w$i"
      FAILED=1; SUMMARY+=("FAIL $name rank $i: no failure (exit $rc)"); continue
    fi
    code=$(sed -n 's/.* failed with \([A-Z_]*\) .*/\1/p' <<<"$line")
    d=$(( $(sed -n 's/.* at \([0-9]*\); .*/\1/p' <<<"$line") - t_kill ))
    failed=$(sed -n 's/.*: settled failed=\(\[[0-9,]*\]\).*/\1/p' "$D/w$i")
    local ok=1 why=""
    # p2p: a survivor whose exchange with the victim had finished this round
    # fails on the revoke the loss causes (ULFM), with ABORTED; the later
    # call, a receive from the victim, must still give PEER_LOST
    if [ "$op" = p2p ] && [ "$code" = ABORTED ]; then
      :
    else
      [ "$code" = PEER_LOST ] || { ok=0; why+=" code $code, want PEER_LOST;"; }
    fi
    [ "$d" -lt "$bound" ] || { ok=0; why+=" $d ms >= $bound ms;"; }
    [[ "$failed" =~ ^\[([0-9]+,)*$want_dead(,[0-9]+)*\]$ ]] ||
      { ok=0; why+=" failed_ranks $failed lacks $want_dead;"; }
    local lcode lms
    lcode=$(sed -n 's/.* -> \([A-Z_]*\) in .*/\1/p' <<<"$later")
    lms=$(sed -n 's/.* in \([0-9]*\) ms$/\1/p' <<<"$later")
    if [ "$lcode" != PEER_LOST ] || [ "${lms:-99999}" -ge $LATER_MS ]; then
      ok=0; why+=" later call $lcode in ${lms:-?} ms, want PEER_LOST < $LATER_MS ms;"
    fi
    if [ $ok = 1 ]; then
      echo "ok   $name: rank $i: $code $d ms after SIG$sig (bound $bound), failed=$failed," \
        "later call ${lcode} in ${lms} ms"
      SUMMARY+=("ok   $name rank $i: $code after $d ms")
    else
      echo "FAIL $name: rank $i:$why"
      sed 's/^/    /' "$D/w$i"
      FAILED=1; SUMMARY+=("FAIL $name rank $i: $code after $d ms;$why")
    fi
  done
  kill -KILL "$vpid" 2>/dev/null
  wait "${wrappers[$victim]}" 2>/dev/null
  kill "$seedpid" 2>/dev/null
  wait "$seedpid" 2>/dev/null
}

for op in allreduce barrier broadcast p2p; do
  run_case kill_before_$op $op KILL before 2
done
for op in allreduce barrier broadcast p2p; do
  run_case kill_mid_$op $op KILL mid 1
done
run_case stop_mid_allreduce allreduce STOP mid 1
run_case stop_mid_p2p p2p STOP mid 2
run_case stop_before_barrier barrier STOP before 0
run_case kill_mid_split_allreduce allreduce KILL mid 0 --split
run_case kill_mid_bigallreduce allreduce KILL mid 2 --count 4194304
run_case stop_mid_bigallreduce allreduce STOP mid 1 --count 4194304
run_case sock_mid_bigallreduce allreduce SOCK mid 1 --count 4194304
run_case sock_mid_bigp2p p2p SOCK mid 2 --count 4194304

echo "--- summary"
printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
