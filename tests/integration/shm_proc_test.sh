#!/usr/bin/env bash
# The shared-memory rings between processes (shm_worker.c): ordered mixed
# point-to-point and collectives over them (4 ranks); a sender SIGKILLed
# while it writes into its ring (the reader gets PEER_LOST within the
# heartbeat bound, every message before it intact); a third process writing
# garbage into a live segment (shm_forger.c: the reader drops the peer with
# PROTOCOL and counts it; nobody crashes or hangs).
#   shm_proc_test.sh <nexar-seed> <shm_worker> <shm_forger>
set -u
SEED=$1 WORKER=$2 FORGER=$3
BOUND_MS=${BOUND_MS:-2500}
. "$(dirname "$0")/proc_lib.sh"
proc_scratch nxshm
export NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1000
export NEXAR_COLLECTIVE_TIMEOUT_MS=20000 NEXAR_CONNECT_TIMEOUT_MS=20000
export NEXAR_RECOVERY_POLICY=manual
FAILED=0
W=()

# start N MODE: a seed and N workers; waits until all are ready (W: pids of
# the wrappers)
start() {
  local n=$1 mode=$2 addr=""
  rm -f "$D"/*
  W=()
  "$SEED" --listen 127.0.0.1:0 --world-size "$n" --once --timeout-ms 20000 >"$D/seed" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    addr=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$D/seed")
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "FAIL $mode: seed did not start"; FAILED=1; return 1; }
  for ((i = 0; i < n; i++)); do
    NEXAR_SEED_ADDR=$addr NEXAR_WORLD_SIZE=$n NEXAR_RANK=$i \
      timeout -s KILL 60 "$WORKER" "$mode" >"$D/w$i" 2>&1 &
    W+=($!)
    PIDS+=($!)
  done
  local ready=0
  for _ in $(seq 300); do
    ready=$(cat "$D"/w* 2>/dev/null | grep -c ': ready pid ')
    [ "$ready" = "$n" ] && return 0
    grep -q FAIL "$D"/w* 2>/dev/null && break
    sleep 0.1
  done
  echo "FAIL $mode: $ready of $n ranks ready"; tail -n 5 "$D"/w*; FAILED=1
  return 1
}
pid_of() { sed -n 's/^rank [0-9]*: ready pid \([0-9]*\).*/\1/p' "$D/w$1"; }

# 4 ranks, and 6: the segment's chunked reductions above 4 ranks
# (NX_CSEG_CHUNK_RANKS) between processes, not only threads (shm_test.c)
for n in 4 6; do
  echo "=== order: $n ranks, mixed point-to-point and collectives by the rings"
  if start $n order; then
    for ((i = 0; i < n; i++)); do
      wait "${W[$i]}"
      rc=$?
      if [ $rc != 0 ]; then echo "FAIL order: rank $i exit $rc"; sed 's/^/    /' "$D/w$i"; FAILED=1
      else grep ': ok' "$D/w$i"; fi
    done
  fi
done

echo "=== kill: rank 1 SIGKILLed while it writes into its ring to rank 0"
if start 2 kill; then
  sleep 1
  vpid=$(pid_of 1)
  t_kill=$(date +%s%3N)
  kill -KILL "$vpid"
  wait "${W[0]}"
  rc=$?
  line=$(grep -m1 'failed with' "$D/w0")
  at=$(sed -n 's/.* at \([0-9]*\):.*/\1/p' <<<"$line")
  echo "    $line"
  if [ $rc != 0 ] || [ -z "$at" ]; then
    echo "FAIL kill: rank 0 exit $rc"; sed 's/^/    /' "$D/w0"; FAILED=1
  elif [ $((at - t_kill)) -gt "$BOUND_MS" ]; then
    echo "FAIL kill: PEER_LOST $((at - t_kill)) ms after the kill (bound $BOUND_MS)"; FAILED=1
  else
    echo "    PEER_LOST $((at - t_kill)) ms after the kill"
  fi
  wait "${W[1]}" 2>/dev/null
fi

echo "=== forge: a third process writes garbage into the segment of ranks 0 and 1"
if start 2 forge; then
  sleep 0.3
  "$FORGER" "$(pid_of 1)" 500
  frc=$?
  for ((i = 0; i < 2; i++)); do
    wait "${W[$i]}"
    rc=$?
    [ $rc = 0 ] || { echo "FAIL forge: rank $i exit $rc"; sed 's/^/    /' "$D/w$i"; FAILED=1; }
  done
  if [ $frc = 77 ]; then
    echo "skip forge: the segment could not be opened from outside (not root)"
  elif [ $frc != 0 ]; then
    echo "FAIL forge: forger exit $frc"; FAILED=1
  elif ! grep -q 'failed with [A-Z_]* shm_dropped=[1-9]' "$D"/w0 "$D"/w1 ||
    ! grep -q 'shared-memory ring: malformed record' "$D"/w0 "$D"/w1; then
    # the reader drops its peer (PROTOCOL, counted); its pending call fails
    # with PROTOCOL, a later one with PEER_LOST (the peer is dead on the
    # communicator), and the peer hears why when the connection closes
    echo "FAIL forge: no rank counted a malformed record and dropped its peer for it"
    cat "$D"/w0 "$D"/w1; FAILED=1
  else
    grep -h 'failed with' "$D"/w0 "$D"/w1 | sed 's/^/    /'
  fi
fi

echo "=== coll_kill: 3 ranks in blocking all_reduce through the collective segment, rank 1 SIGKILLed"
export NEXAR_DEBUG=1 # the log says the segment came up
if start 3 coll; then
  sleep 1
  vpid=$(pid_of 1)
  t_kill=$(date +%s%3N)
  kill -KILL "$vpid"
  for i in 0 2; do
    wait "${W[$i]}"
    rc=$?
    line=$(grep -m1 'failed with' "$D/w$i")
    at=$(sed -n 's/.* at \([0-9]*\):.*/\1/p' <<<"$line")
    echo "    ${line:0:160}"
    if [ $rc != 0 ] || [ -z "$at" ] || ! grep -q 'failed with PEER_LOST' <<<"$line"; then
      echo "FAIL coll_kill: rank $i exit $rc, not PEER_LOST"; grep -v DEBUG "$D/w$i" | tail -5; FAILED=1
    elif [ $((at - t_kill)) -gt "$BOUND_MS" ]; then
      echo "FAIL coll_kill: rank $i PEER_LOST $((at - t_kill)) ms after the kill"; FAILED=1
    fi
    grep -q 'collective segment up' "$D/w$i" ||
      { echo "FAIL coll_kill: rank $i never had a collective segment"; FAILED=1; }
  done
  wait "${W[1]}" 2>/dev/null
fi

# forge_case NAME MODE PATTERN WHAT [N]: N (3) ranks in the coll loop, the
# forger writes into rank 1's collective segment (MODE), every rank must
# exit 0 and some log must show PATTERN (the forged words refused).
forge_case() {
  local name=$1 mode=$2 pattern=$3 what=$4 n=${5:-3} frc rc i
  if start "$n" coll; then
    sleep 0.3
    "$FORGER" "$(pid_of 1)" 500 "$mode"
    frc=$?
    for ((i = 0; i < n; i++)); do
      wait "${W[$i]}"
      rc=$?
      [ $rc = 0 ] || { echo "FAIL $name: rank $i exit $rc"; grep -v DEBUG "$D/w$i" | tail -5; FAILED=1; }
    done
    if [ $frc = 77 ]; then
      echo "skip $name: the segment could not be opened from outside (not root)"
    elif [ $frc != 0 ]; then
      echo "FAIL $name: forger exit $frc"; FAILED=1
    elif ! cat "$D"/w[0-9] | grep -q "$pattern"; then
      echo "FAIL $name: no rank refused the forged $what"
      cat "$D"/w[0-9] | grep 'failed with' | cut -c1-200; FAILED=1
    else
      cat "$D"/w[0-9] | grep 'failed with' | cut -c1-160 | sed 's/^/    /'
    fi
  fi
}
echo "=== coll_forge: a third process writes impossible arrivals into the collective segment"
forge_case coll_forge coll "failed with PROTOCOL .*impossible sequence" arrivals
echo "=== coll_forge_ring: a third process writes impossible sequences into the small-broadcast entries"
forge_case coll_forge_ring bcast "small broadcast .*failed with PROTOCOL .*impossible sequence" entries
echo "=== coll_forge_how: a third process writes an impossible way into two ranks' arrivals"
forge_case coll_forge_how how "failed with PROTOCOL .*impossible way" "ways" 2
unset NEXAR_DEBUG

# bind_check MODE: 2 ranks; with a CPU each (auto, as core), their main
# threads' CPU lists differ and neither is the whole set, while the
# library's threads keep the whole set; with none, nothing is bound
bind_check() {
  local mode=$1 all
  all=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
  export NEXAR_CPU_BIND=$mode
  if start 2 bind; then
    wait "${W[0]}"; wait "${W[1]}"
    local m0 m1 l0 l1
    m0=$(sed -n 's/^rank 0: cpus main=\([^ ]*\) .*/\1/p' "$D/w0")
    m1=$(sed -n 's/^rank 1: cpus main=\([^ ]*\) .*/\1/p' "$D/w1")
    l0=$(sed -n 's/^rank 0: .* library=//p' "$D/w0")
    l1=$(sed -n 's/^rank 1: .* library=//p' "$D/w1")
    echo "    $mode: rank 0 main on $m0, library on $l0; rank 1 main on $m1, library on $l1 (of $all)"
    if [ -z "$m0" ] || [ -z "$m1" ]; then
      echo "FAIL bind $mode: no CPU lists"; tail -n 3 "$D"/w*; FAILED=1
    elif [ "$l0" != "$all" ] || [ "$l1" != "$all" ]; then
      echo "FAIL bind $mode: the library's threads are bound"; FAILED=1
    elif [ "$mode" = none ] && { [ "$m0" != "$all" ] || [ "$m1" != "$all" ]; }; then
      echo "FAIL bind none: a main thread is bound"; FAILED=1
    elif [ "$mode" != none ] && { [ "$m0" = "$all" ] || [ "$m1" = "$all" ] || [ "$m0" = "$m1" ]; }; then
      echo "FAIL bind $mode: the main threads do not have a share each"; FAILED=1
    fi
  fi
  unset NEXAR_CPU_BIND
}
if [ "$(nproc)" -ge 2 ] && [ "$(nproc)" = "$(getconf _NPROCESSORS_ONLN)" ]; then
  echo "=== bind: NEXAR_CPU_BIND, 2 ranks on $(nproc) CPUs"
  bind_check auto
  bind_check none
else
  echo "skip bind: fewer than 2 CPUs, or this process is bound already"
fi

# A world of 2 maps its point-to-point segment whole when it sets it up:
# 3000 round trips of 1 KiB move each ring through all its pages, and took
# ~1000 page faults a process when pages were backed on first touch.
echo "=== faults: 2 ranks, 3000 round trips of 1 KiB after set-up"
if start 2 faults; then
  wait "${W[0]}"; wait "${W[1]}"
  for i in 0 1; do
    f=$(sed -n "s/^rank $i: faults \([0-9]*\)$/\1/p" "$D/w$i")
    echo "    rank $i: ${f:-?} page faults"
    if [ -z "$f" ] || [ "$f" -gt 200 ]; then
      echo "FAIL faults: rank $i took ${f:-no count of} page faults"; tail -n 3 "$D/w$i"; FAILED=1
    fi
  done
fi

[ $FAILED = 0 ] && echo "ok: shm processes" || echo "FAIL: shm processes"
exit $FAILED
