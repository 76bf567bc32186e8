#!/usr/bin/env bash
# Workers form despite 2,000 idle connections to the seed (loopback only).
# nexar-seed runs under `ulimit -n ${SEED_NOFILE:-1024}`; seed_holder keeps 2,000 silent
# connections to it open, reopening each one the seed closes; then 3
# mesh_worker processes join (connect timeout 30 s). Every worker must form
# and finish (exit 0) within FORM_BOUND_S, none may see NEXAR_ERR_AUTH, and
# the seed's thread count (sampled all along) must stay under THREAD_BOUND.
#   seed_flood_test.sh <nexar-seed> <seed_holder> <mesh_worker>
set -u
SEED=$1 HOLDER=$2 WORKER=$3
N=3 IDLE=${IDLE:-2000}
FORM_BOUND_S=${FORM_BOUND_S:-25}
THREAD_BOUND=${THREAD_BOUND:-40}
. "$(dirname "$0")/proc_lib.sh"
proc_scratch nxflood
export NEXAR_CONNECT_TIMEOUT_MS=30000
NOFILE=${SEED_NOFILE:-1024}
HARD=$(ulimit -Hn)
[ "$HARD" != unlimited ] && [ "$HARD" -lt "$NOFILE" ] && NOFILE=$HARD
(ulimit -n "$NOFILE" && exec "$SEED" --listen 127.0.0.1:0 --world-size $N --once --timeout-ms 90000) \
  >"$D/seed" 2>"$D/seed.err" &
SEEDPID=$!
PIDS+=($SEEDPID)
for _ in $(seq 100); do grep -q NEXAR_SEED_ADDR "$D/seed" && break; sleep 0.1; done
ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$D/seed")
[ -n "$ADDR" ] || { echo "FAIL: no seed address"; cat "$D/seed.err"; exit 1; }
PORT=${ADDR##*:}
"$HOLDER" "$PORT" "$IDLE" 120 >"$D/holder" 2>&1 &
PIDS+=($!)
for _ in $(seq 150); do grep -qE "holding|reached" "$D/holder" && break; sleep 0.1; done
echo "holder: $(cat "$D/holder")"
maxthr=0
sample() {
  local t
  t=$(awk '/^Threads:/ {print $2}' /proc/$SEEDPID/status 2>/dev/null)
  [ -n "$t" ] && [ "$t" -gt "$maxthr" ] && maxthr=$t
}
sleep 1; sample
echo "seed threads with the idle connections held: $maxthr"
export NEXAR_SEED_ADDR=$ADDR NEXAR_WORLD_SIZE=$N
t0=$(date +%s%N)
WPIDS=()
for r in $(seq 0 $((N - 1))); do
  "$WORKER" >"$D/w$r" 2>&1 &
  WPIDS+=($!)
  PIDS+=($!)
done
FAILED=0
deadline=$(($(date +%s) + FORM_BOUND_S))
for i in "${!WPIDS[@]}"; do
  p=${WPIDS[$i]}
  while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sample; sleep 0.1; done
  if kill -0 "$p" 2>/dev/null; then
    echo "FAIL: worker $i still running after ${FORM_BOUND_S} s"; FAILED=1; continue
  fi
  wait "$p"; rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: worker $i exited $rc: $(tail -3 "$D/w$i")"; FAILED=1; fi
  if grep -q "AUTH" "$D/w$i"; then echo "FAIL: worker $i saw AUTH: $(grep AUTH "$D/w$i")"; FAILED=1; fi
done
ms=$((($(date +%s%N) - t0) / 1000000))
sample
echo "workers done in $ms ms; seed threads at most $maxthr (bound $THREAD_BOUND)"
[ "$maxthr" -le "$THREAD_BOUND" ] || { echo "FAIL: the seed ran $maxthr threads"; FAILED=1; }
kill -TERM ${PIDS[1]} 2>/dev/null; wait ${PIDS[1]} 2>/dev/null
echo "holder: $(tail -1 "$D/holder")"
for _ in $(seq 50); do kill -0 $SEEDPID 2>/dev/null || break; sleep 0.1; done
[ $FAILED -eq 0 ] && echo PASSED || { echo "seed stderr:"; tail -5 "$D/seed.err"; echo FAILED; }
exit $FAILED
