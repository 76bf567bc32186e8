#!/usr/bin/env bash
# Elastic membership with processes, one per network namespace on a bridge
# (addresses 10.81.0.x: joiners advertise their veth address, never
# loopback), a seed in host 1 that keeps serving after formation, one
# elastic_worker per process (allreduce + checkpoint every 20 ms).
# Scenarios (default: all; or the names given):
#   grow          2 members train; 2 joiners in new namespaces start: all four
#                 see world 4 (members keep ranks 0,1; joiners are 2,3 with
#                 new=1), the same comm, and the allreduce sums over four
#   leave         3 members, rank 1 leaves at step 10: it exits 0 "left", the
#                 others get world 2 in a checkpoint that takes < 1 s
#   joiner_dies   a joiner exits once its connections are up (test hook
#                 NEXAR_TEST_AGREE_EXIT=ready): the members' checkpoint fails
#                 naming it and the view stays; a second joiner then gets in
#   joiner_dies_late  a joiner dies after its readiness was collected (hook
#                 promise): the change commits, the barrier that settles it
#                 fails, the survivors recover it; a second joiner then gets in
#   member_dies   4 members, one SIGKILLed: the others see PEER_LOST, recover
#                 to one view of 3
#   seed_dies     the seed is killed after formation: a leave still works
#                 and a new joiner fails fast (IO, within 6 s), never in a view
#   wrong_token   a joiner with another cluster token: AUTH, never in a view
#   max_world     the seed's elastic_max_world = 3, two joiners: exactly one admitted
#   cycles        10 rounds of +2 joiners / -2 (the joiners leave again),
#                 the allreduce checked after each
#   elastic_test.sh <nexar-seed> <elastic_worker> [scenario...]
# Needs root; skips (exit 77) otherwise.
set -u
. "$(dirname "$0")/netns_lib.sh"
SEED=$1 WORKER=$2
shift 2
SCENARIOS=${*:-"grow leave joiner_dies joiner_dies_late member_dies seed_dies wrong_token max_world cycles"}
export NX_HOSTS=6
nx_netns_session nxe$$ 10.81.0
trap 'pkill -KILL -x "$(basename "$WORKER")" 2>/dev/null; for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; nx_netns_down; rm -f /tmp/$P.*' EXIT
export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1500
export NEXAR_COLLECTIVE_TIMEOUT_MS=20000 NEXAR_CONNECT_TIMEOUT_MS=20000
export NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS=15000 NEXAR_RECOVERY_TIMEOUT_MS=10000
FAILED=0
ADDR=""
SEEDPID=""

fail() {
  echo "FAIL $*"
  FAILED=1
}

# seed N [args]: a seed for a first world of N in host 1; ADDR is its address
seed() {
  local n=$1
  shift
  rm -f /tmp/$P.*
  ip netns exec ${P}h1 "$SEED" --listen 10.81.0.1:0 --world-size "$n" "$@" >/tmp/$P.seed 2>&1 &
  SEEDPID=$!
  PIDS+=($SEEDPID)
  ADDR=""
  for _ in $(seq 100); do
    ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' /tmp/$P.seed)
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  fail "seed did not start"
  return 1
}

# member NAME HOST RANK N [worker args]: a process of the first world
member() {
  local name=$1 host=$2 rank=$3 n=$4
  shift 4
  ip netns exec ${P}h$host env NEXAR_SEED_ADDR=$ADDR NEXAR_WORLD_SIZE=$n NEXAR_RANK=$rank \
    timeout -s KILL 120 "$WORKER" "$@" >/tmp/$P.$name 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}

# joiner NAME HOST [env...] -- [worker args]: a process that joins the running world
joiner() {
  local name=$1 host=$2
  shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  ip netns exec ${P}h$host env NEXAR_SEED_ADDR=$ADDR "${envs[@]}" \
    timeout -s KILL 60 "$WORKER" "$@" >/tmp/$P.$name 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}

# wait_for NAME PATTERN [tenths]: until the log of NAME has a line matching PATTERN
wait_for() {
  for _ in $(seq "${3:-150}"); do
    grep -q "$2" /tmp/$P.$1 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$1: no '$2' in time"
  tail -n 5 /tmp/$P.$1 | sed 's/^/    /'
  return 1
}

# finish NAME...: waits for each; checks exit 0 and prints its last line
finish() {
  local name pid rc
  for name in "$@"; do
    eval "pid=\$PID_$name"
    wait "$pid"
    rc=$?
    if [ "$rc" != 0 ]; then
      fail "$name exited $rc"
      tail -n 6 /tmp/$P.$name | sed 's/^/    /'
    fi
  done
}

final() { sed -n 's/.*: final \(.*\)/\1/p' /tmp/$P.$1; }
comm_of() { final "$1" | sed -n 's/.* comm \([0-9a-f]*\).*/\1/p'; }

# same_final WANT_WORLD NAME...: all ended in the same comm with WANT_WORLD ranks
same_final() {
  local want=$1 first="" name c
  shift
  for name in "$@"; do
    c=$(comm_of "$name")
    [[ "$(final "$name")" == "world $want "* ]] || fail "$name: final '$(final "$name")', want world $want"
    [ -z "$first" ] && first=$c
    [ "$c" = "$first" ] || fail "$name ended in comm $c, $1 in $first"
  done
}

stop_seed() {
  kill "$SEEDPID" 2>/dev/null
  wait "$SEEDPID" 2>/dev/null
}

scenario_grow() {
  seed 2 || return
  member m0 1 0 2 --until-world 4 --extra 20
  member m1 2 1 2 --until-world 4 --extra 20
  wait_for m0 ": ready" && wait_for m1 ": ready" || return
  sleep 0.5
  joiner j0 3 -- --until-world 4 --extra 20
  joiner j1 4 -- --until-world 4 --extra 20
  finish m0 m1 j0 j1
  same_final 4 m0 m1 j0 j1
  grep -q "final world 4 rank 0 " /tmp/$P.m0 && grep -q "final world 4 rank 1 " /tmp/$P.m1 ||
    fail "grow: the members did not keep ranks 0 and 1"
  # Both joiners in one checkpoint (2 -> 4), or, when the second one's
  # request reaches the seed after a checkpoint began (a loaded machine),
  # in the next (2 -> 3 -> 4): admission is per checkpoint.
  for j in j0 j1; do
    grep -q "ready world [34] rank [23] new 1" /tmp/$P.$j || fail "grow: $j is not rank 2 or 3 with new=1"
  done
  local v
  v=$(grep ': view ' /tmp/$P.m0 | head -n 2 | tr '\n' ' ')
  [[ "$v" == *"joined 2 left 0 old_world 2"* ||
    ("$v" == *"joined 1 left 0 old_world 2"* && "$v" == *"joined 1 left 0 old_world 3"*) ]] ||
    fail "grow: member 0's views '$v'"
  echo "ok   grow 2 -> 4 across namespaces: ${v#*: }"
  echo "     joiner waited: $(sed -n 's/.*ready.* in \([0-9]*\) ms/\1 ms/p' /tmp/$P.j0)"
  stop_seed
}

scenario_leave() {
  seed 3 || return
  member m0 1 0 3 --until-world 2 --extra 10
  member m1 2 1 3 --leave-at 10
  member m2 3 2 3 --until-world 2 --extra 10
  finish m0 m1 m2
  grep -q "left at step" /tmp/$P.m1 || fail "leave: the leaver did not report leaving"
  same_final 2 m0 m2
  local ms
  ms=$(sed -n 's/.*: view .*world 2 .* in \([0-9]*\) ms/\1/p' /tmp/$P.m0)
  [ -n "$ms" ] && [ "$ms" -lt 1000 ] || fail "leave: the checkpoint took ${ms:-?} ms (bound 1000)"
  echo "ok   leave: 3 -> 2 in a ${ms:-?} ms checkpoint"
  stop_seed
}

scenario_joiner_dies() {
  seed 2 || return
  member m0 1 0 2 --until-world 3 --extra 10
  member m1 2 1 2 --until-world 3 --extra 10
  wait_for m0 ": ready" && wait_for m1 ": ready" || return
  joiner bad 3 NEXAR_TEST_AGREE_EXIT=ready -- --until-world 3
  wait_for m0 "checkpoint failed" 200 || return
  local why
  why=$(grep -m1 "checkpoint failed" /tmp/$P.m0)
  [[ "$why" == *"member 2 at 10.81.0.3:"* ]] || fail "joiner_dies: the error does not name the joiner: $why"
  joiner good 4 -- --until-world 3 --extra 10
  finish m0 m1 good
  same_final 3 m0 m1 good
  echo "ok   joiner_dies: ${why#*: }"
  echo "     then the next joiner got in: $(final good)"
  stop_seed
}

# a joiner whose readiness the agreement collected dies before the commit
# (hook "promise": it answers, then exits): the change commits, the barrier
# that settles it fails, and the survivors recover it: one view without it
scenario_joiner_dies_late() {
  seed 2 || return
  member m0 1 0 2 --until-world 3 --extra 10
  member m1 2 1 2 --until-world 3 --extra 10
  wait_for m0 ": ready" && wait_for m1 ": ready" || return
  joiner bad 3 NEXAR_TEST_AGREE_EXIT=promise -- --until-world 3
  wait_for m0 "world 2 rank 0 new 0 joined 0" 200 || return
  local v
  v=$(grep -m1 ': view ' /tmp/$P.m0)
  joiner good 4 -- --until-world 3 --extra 10
  finish m0 m1 good
  same_final 3 m0 m1 good
  echo "ok   joiner_dies_late: ${v#*: }"
  stop_seed
}

scenario_member_dies() {
  seed 4 || return
  local r
  for r in 0 1 2 3; do member m$r $((r + 1)) $r 4 --until-world 3 --extra 10; done
  for r in 0 1 2 3; do wait_for m$r ": ready" || return; done
  sleep 0.5
  kill -KILL "$(sed -n 's/.*pid \([0-9]*\).*/\1/p' /tmp/$P.m2)"
  finish m0 m1 m3
  grep -q "recovered epoch 1 world 3" /tmp/$P.m0 || fail "member_dies: no recovered view on m0"
  same_final 3 m0 m1 m3
  echo "ok   member_dies: $(grep -m1 'recovered' /tmp/$P.m0 | cut -d: -f2-)"
  stop_seed
}

scenario_seed_dies() {
  seed 3 || return
  member m0 1 0 3 --until-world 2 --extra 10
  member m1 2 1 3 --leave-at 250
  member m2 3 2 3 --until-world 2 --extra 10
  wait_for m0 ": ready" || return
  sleep 0.2
  kill -KILL "$SEEDPID"
  wait "$SEEDPID" 2>/dev/null
  local t0 t1
  t0=$(date +%s%3N)
  joiner late 4 -- --until-world 3
  wait "$PID_late"
  local rc=$?
  t1=$(date +%s%3N)
  grep -q "join -> IO" /tmp/$P.late || fail "seed_dies: the joiner did not fail with IO: $(cat /tmp/$P.late)"
  [ $((t1 - t0)) -lt 6000 ] || fail "seed_dies: the joiner took $((t1 - t0)) ms to fail (bound 6000)"
  finish m0 m1 m2
  same_final 2 m0 m2
  echo "ok   seed_dies: leave worked without the seed; a joiner failed in $((t1 - t0)) ms: $(head -c 140 /tmp/$P.late)"
}

scenario_wrong_token() {
  seed 2 || return
  member m0 1 0 2 --until-world 2 --extra 60
  member m1 2 1 2 --until-world 2 --extra 60
  wait_for m0 ": ready" || return
  joiner bad 3 NEXAR_CLUSTER_TOKEN=00112233445566778899aabbccddeeff -- --until-world 3
  wait "$PID_bad"
  local rc=$?
  [ "$rc" = 7 ] || fail "wrong_token: the joiner exited $rc, want 7 (AUTH): $(cat /tmp/$P.bad)"
  finish m0 m1
  same_final 2 m0 m1
  echo "ok   wrong_token: $(head -c 150 /tmp/$P.bad)"
  stop_seed
}

scenario_max_world() {
  NEXAR_ELASTIC_MAX_WORLD=3 seed 2 || return # the seed's config (nexar-seed --max-world 3)
  member m0 1 0 2 --until-world 3 --extra 30
  member m1 2 1 2 --until-world 3 --extra 30
  wait_for m0 ": ready" || return
  NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS=4000 joiner j0 3 -- --until-world 3 --extra 30
  NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS=4000 joiner j1 4 -- --until-world 3 --extra 30
  finish m0 m1
  wait "$PID_j0"
  local r0=$?
  wait "$PID_j1"
  local r1=$?
  local ok=0
  [ "$r0" = 0 ] && ok=$((ok + 1))
  [ "$r1" = 0 ] && ok=$((ok + 1))
  [ "$ok" = 1 ] || fail "max_world: $ok joiners admitted (exit $r0, $r1), want exactly 1"
  same_final 3 m0 m1
  echo "ok   max_world 3: one joiner admitted, the other: $(grep -h 'join ->' /tmp/$P.j0 /tmp/$P.j1 | head -c 120)"
  stop_seed
}

scenario_cycles() {
  seed 2 || return
  member m0 1 0 2 --until-world 2 --cycles 10 --extra 5 --max-seconds 100
  member m1 2 1 2 --until-world 2 --cycles 10 --extra 5 --max-seconds 100
  wait_for m0 ": ready" || return
  local k
  for k in $(seq 10); do
    joiner a$k 3 -- --leave-when-world 4
    joiner b$k 4 -- --leave-when-world 4
    finish a$k b$k
    grep -q "left at step" /tmp/$P.a$k || fail "cycles: round $k: the joiner did not leave"
  done
  finish m0 m1
  same_final 2 m0 m1
  local shrinks
  shrinks=$(grep -c ': view .* world 2 ' /tmp/$P.m0)
  [ "$shrinks" = 10 ] || fail "cycles: member 0 went back to 2 ranks $shrinks times, want 10"
  echo "ok   cycles: 10 x (2 -> 4 -> 2) in $(grep -c ': view ' /tmp/$P.m0) views, final $(final m0)"
  stop_seed
}

for s in $SCENARIOS; do
  echo "=== $s"
  PID_m0="" PID_m1=""
  "scenario_$s"
  pkill -KILL -x "$(basename "$WORKER")" 2>/dev/null
  wait 2>/dev/null
done
[ "$FAILED" = 0 ] && echo "elastic_test: all passed"
exit $FAILED
