#!/usr/bin/env bash
# Recovery by agreement across network namespaces: every rank in its own
# namespace on a bridge, a seed in host 1, heartbeat 200 ms / timeout 1 s,
# one recover_worker per rank. Scenarios (by default all but scale, which is
# run by name; or the names given):
#   kill_bigallreduce  SIGKILL 1 of 4 during 16 MiB allreduces: survivors fail
#                      with PEER_LOST naming it within 1.5 s of the kill, recover
#                      within 3 s to one identical view (comm, epoch, world,
#                      members), and the next allreduce is exact
#   silent             nft drops all of one rank's traffic: the others fail
#                      within heartbeat timeout + interval + 0.5 s and recover;
#                      the cut-off rank never gets a view (minority)
#   p2p_revoke         ranks 0 and 1 block in receives from each other, 3 from
#                      2; 2 is killed: the revoke wakes 0 and 1 (ABORTED) in 1.5 s
#   coord_collect, coord_accept, coord_commit
#                      N=5, rank 4 killed; rank 0, the coordinator, _exits after
#                      sending COLLECT / ACCEPT to 1 / COMMIT to 1 member: ranks
#                      1-3 still install one identical view without 0 and 4
#   agree              nexar_agree in a loop, one of 4 killed: PEER_LOST, then
#                      one view
#   cascade            N=6, two ranks killed 100 ms apart: one view of 4
#   rounds             N=5, three kill-and-recover rounds in a row
#   asym               nft drops only rank 1 <-> rank 2 traffic: exactly one of
#                      them is evicted (recover says it was declared failed),
#                      the three others agree on one view
#   partition          2|2 at N=4: everyone gets ABORTED ("no majority"); with
#                      NEXAR_RECOVERY_QUORUM=survivors each side forms a 2-rank view
#   (soak and rounds once failed now and then under load: a survivor closed
#   the connection to a live member on a "malformed agreement message", a
#   re-entered agreement pass sending freed memory; fixed, unit.agree_nest_test)
#   soak               SOAK_RUNS (default 4) runs: N=4, random victim and kill
#                      time; every survivor recovers to the same view, exactly
#   recover_test.sh <nexar-seed> <recover_worker> [scenario...]
# Needs root; skips (exit 77) otherwise.
set -u
. "$(dirname "$0")/netns_lib.sh"
SEED=$1 WORKER=$2
shift 2
SCENARIOS=${*:-"kill_bigallreduce silent p2p_revoke agree coord_collect coord_accept coord_commit cascade rounds asym partition soak"}
export NX_HOSTS=${NX_HOSTS:-6}
nx_netns_session nxr$$ 10.79.0
trap 'pkill -KILL -x "$(basename "$WORKER")" 2>/dev/null; for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; nx_netns_down; rm -f /tmp/$P.*' EXIT
export NEXAR_CLUSTER_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1000
export NEXAR_COLLECTIVE_TIMEOUT_MS=20000 NEXAR_BARRIER_TIMEOUT_MS=20000
export NEXAR_RECOVERY_TIMEOUT_MS=8000 NEXAR_CONNECT_TIMEOUT_MS=20000
FAILED=0
declare -a RANK_ENV=()
STATS=/tmp/$P.stats
: >"$STATS.keep"

fail() {
  echo "FAIL $*"
  FAILED=1
}

# start_world NAME N [worker args...]; per-rank environment in RANK_ENV[i].
start_world() {
  local name=$1 n=$2
  shift 2
  rm -f /tmp/$P.w* /tmp/$P.seed
  for i in $(seq $NX_HOSTS); do ip netns exec ${P}h$i nft flush ruleset 2>/dev/null; done
  ip netns exec ${P}h1 "$SEED" --listen 10.79.0.1:0 --world-size "$n" --once --timeout-ms 20000 \
    >/tmp/$P.seed 2>&1 &
  SEEDPID=$!
  PIDS+=($SEEDPID)
  local addr=""
  for _ in $(seq 300); do
    addr=$(sed -n 's/^NEXAR_SEED_ADDR=//p' /tmp/$P.seed)
    [ -n "$addr" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] || { fail "$name: seed did not start"; sed 's/^/    /' /tmp/$P.seed; return 1; }
  W=()
  for i in $(seq "$n"); do
    ip netns exec ${P}h$i env NEXAR_SEED_ADDR=$addr NEXAR_WORLD_SIZE=$n NEXAR_RANK=$((i - 1)) \
      ${RANK_ENV[$i]:-} \
      timeout -s KILL 60 "$WORKER" "$@" >/tmp/$P.w$((i - 1)) 2>&1 &
    W+=($!)
    PIDS+=($!)
  done
  local ready=0
  for _ in $(seq $((300 + 40 * n))); do
    ready=$(cat /tmp/$P.w* 2>/dev/null | grep -c ': ready pid ')
    [ "$ready" = "$n" ] && return 0
    sleep 0.1
  done
  fail "$name: only $ready of $n ranks ready"
  tail -n 3 /tmp/$P.w? /tmp/$P.seed
  pkill -KILL -x "$(basename "$WORKER")" 2>/dev/null
  wait 2>/dev/null
  return 1
}

# end_world: waits for every worker; RC[r] gets its exit code.
end_world() {
  RC=()
  for r in "${!W[@]}"; do
    wait "${W[$r]}"
    RC[$r]=$?
  done
  kill $SEEDPID 2>/dev/null
  wait $SEEDPID 2>/dev/null
  RANK_ENV=()
}

now_ms() { date +%s%3N; }

# kill_rank R: SIGKILL the worker process of rank R (not the timeout wrapper)
kill_rank() {
  local pid
  pid=$(sed -n 's/.*: ready pid \([0-9]*\) .*/\1/p' /tmp/$P.w$1)
  kill -KILL "${pid:-${W[$1]}}"
}

# view R: the last installed view of rank R ("comm=.. epoch=.. world=.. members=[..]")
view() { grep ': view ' /tmp/$P.w$1 | tail -n1 | sed -n 's/.*: view \(comm=[^ ]* epoch=[^ ]* world=[^ ]*\) rank=[^ ]* \(members=[^ ]*\).*/\1 \2/p'; }

# check_views NAME WANT_MEMBERS RANKS...: each rank exited 0 with the same last
# view, whose members are WANT_MEMBERS ("" = any)
check_views() {
  local name=$1 want=$2 first="" r v
  shift 2
  for r in "$@"; do
    v=$(view "$r")
    if [ "${RC[$r]}" != 0 ] || [ -z "$v" ]; then
      fail "$name: rank $r exited ${RC[$r]} (view: ${v:-none})"
      sed 's/^/    /' /tmp/$P.w$r | tail -n 8
      continue
    fi
    [ -z "$first" ] && first=$v
    [ "$v" = "$first" ] || fail "$name: rank $r installed '$v', rank $1 '$first'"
  done
  [ -n "$want" ] && [ -n "$first" ] && [[ "$first" != *"members=[$want]"* ]] &&
    fail "$name: view '$first', want members [$want]"
  [ -n "$first" ] && echo "ok   $name: ranks $* installed one view: $first"
}

# first_failure R: "CODE AT_MS" of rank R's first failed operation
first_failure() { sed -n 's/.*: op failed with \([A-Z_]*\) after [0-9]* ms at \([0-9]*\):.*/\1 \2/p' /tmp/$P.w$1 | head -n1; }
recover_ms() { grep ': view ' /tmp/$P.w$1 | head -n1 | sed -n 's/.* in \([0-9]*\) ms at.*/\1/p'; }

# check_detect NAME T_FAULT BOUND_MS CODE RANKS...: the first failure of each
# rank is CODE within BOUND_MS of T_FAULT; records detection and recovery times
check_detect() {
  local name=$1 t=$2 bound=$3 want=$4 r f code at d rec
  shift 4
  for r in "$@"; do
    f=$(first_failure "$r")
    code=${f% *} at=${f#* }
    if [ -z "$f" ]; then
      fail "$name: rank $r reported no failure"
      sed 's/^/    /' /tmp/$P.w$r | tail -n 5
      continue
    fi
    d=$((at - t))
    rec=$(recover_ms "$r")
    if [ "$code" = "$want" ] && [ "$d" -lt "$bound" ]; then
      echo "ok   $name: rank $r: $code $d ms after the fault (bound $bound), recovered in ${rec:-?} ms"
      echo "$name detect $d recover ${rec:-0}" >>"$STATS.keep"
    else
      fail "$name: rank $r: $code after $d ms (want $want within $bound ms)"
      sed 's/^/    /' /tmp/$P.w$r | tail -n 5
    fi
  done
}

scenario_kill_bigallreduce() {
  start_world kill_bigallreduce 4 allreduce --count 4194304 || return
  sleep 1
  local t
  t=$(now_ms)
  kill_rank 2
  end_world
  check_detect kill_bigallreduce "$t" 1500 PEER_LOST 0 1 3
  for r in 0 1 3; do
    local rec
    rec=$(recover_ms $r)
    [ -n "$rec" ] && [ "$rec" -lt 3000 ] || fail "kill_bigallreduce: rank $r recovered in ${rec:-?} ms (bound 3000)"
  done
  check_views kill_bigallreduce 0,1,3 0 1 3
}

scenario_silent() {
  start_world silent 4 allreduce || return
  sleep 1
  local t
  ip netns exec ${P}h3 nft -f - <<NFT
table inet nxr {
  chain in { type filter hook input priority 0; policy drop; }
  chain out { type filter hook output priority 0; policy drop; }
}
NFT
  t=$(now_ms)
  end_world
  check_detect silent "$t" 1700 PEER_LOST 0 1 3
  check_views silent 0,1,3 0 1 3
  [ "${RC[2]}" != 0 ] || fail "silent: the cut-off rank 2 got a view"
  echo "     silent: cut-off rank 2 exited ${RC[2]}: $(grep -m1 'recover ->' /tmp/$P.w2 | cut -c1-150)"
}

scenario_p2p_revoke() {
  start_world p2p_revoke 4 p2pwait || return
  sleep 1
  local t
  t=$(now_ms)
  kill_rank 2
  end_world
  check_detect p2p_revoke "$t" 1500 ABORTED 0 1
  check_views p2p_revoke 0,1,3 0 1 3
}

# coord POINT: rank 0 (the coordinator) exits at the hook point
scenario_coord() {
  local name=coord_$1 hook=$1
  [ "$hook" = collect ] || hook=$hook:1
  RANK_ENV[1]="NEXAR_TEST_AGREE_EXIT=$hook"
  start_world "$name" 5 allreduce || return
  sleep 1
  kill_rank 4
  end_world
  [ "${RC[0]}" = 9 ] || fail "$name: rank 0 exited ${RC[0]}, want 9 (the hook)"
  check_views "$name" 1,2,3 1 2 3
}

# agree: nexar_agree in a loop (one round ANDs a 0 in), rank 3 killed: the
# survivors' agree returns PEER_LOST, then they recover to one view
scenario_agree() {
  start_world agree 4 agree || return
  sleep 1
  local t
  t=$(now_ms)
  kill_rank 3
  end_world
  check_detect agree "$t" 1500 PEER_LOST 0 1 2
  check_views agree 0,1,2 0 1 2
}

scenario_cascade() {
  start_world cascade 6 allreduce || return
  sleep 1
  kill_rank 5
  sleep 0.1
  kill_rank 3
  end_world
  check_views cascade 0,1,2,4 0 1 2 4
}

scenario_rounds() {
  start_world rounds 5 allreduce --rounds 3 || return
  sleep 1
  local victim j=0 r n survivors=(0 1 2 3 4) epoch
  for victim in 4 2 3; do
    j=$((j + 1))
    kill_rank $victim
    survivors=(${survivors[@]/$victim/})
    for _ in $(seq 150); do # every survivor installed its j-th view
      n=0
      for r in "${survivors[@]}"; do [ "$(grep -c ': view ' /tmp/$P.w$r)" -ge $j ] && n=$((n + 1)); done
      [ $n = ${#survivors[@]} ] && break
      sleep 0.1
    done
    sleep 0.5
  done
  end_world
  check_views rounds 0,1 0 1
  epoch=$(view 0 | sed -n 's/.*epoch=\([0-9]*\).*/\1/p')
  [ "${epoch:-0}" -ge 3 ] || fail "rounds: final epoch ${epoch:-?}, want >= 3"
}

scenario_asym() {
  start_world asym 4 allreduce || return
  sleep 1
  ip netns exec ${P}h2 nft -f - <<NFT
table inet nxr {
  chain in { type filter hook input priority 0; ip saddr 10.79.0.3 drop; }
  chain out { type filter hook output priority 0; ip daddr 10.79.0.3 drop; }
}
NFT
  end_world
  local evicted=() kept=() r
  for r in 1 2; do
    if [ "${RC[$r]}" = 5 ] && grep -q 'declared failed' /tmp/$P.w$r; then evicted+=($r); else kept+=($r); fi
  done
  if [ "${#evicted[@]}" = 1 ]; then
    echo "ok   asym: rank ${evicted[0]} was evicted and learned it:" \
      "$(grep -m1 'recover ->' /tmp/$P.w${evicted[0]} | cut -c1-140)"
    check_views asym "" 0 3 "${kept[@]}"
  else
    fail "asym: ${#evicted[@]} of ranks 1 and 2 evicted (exit codes ${RC[1]}, ${RC[2]}), want exactly one"
    for r in 0 1 2 3; do sed 's/^/    /' /tmp/$P.w$r | tail -n 4; done
  fi
}

scenario_partition() {
  local q
  for q in majority survivors; do
    export NEXAR_RECOVERY_QUORUM=$q
    start_world partition_$q 4 allreduce || continue
    sleep 1
    for i in 1 2; do
      ip netns exec ${P}h$i nft -f - <<NFT
table inet nxr {
  chain in { type filter hook input priority 0; ip saddr { 10.79.0.3, 10.79.0.4 } drop; }
  chain out { type filter hook output priority 0; ip daddr { 10.79.0.3, 10.79.0.4 } drop; }
}
NFT
    done
    for i in 3 4; do
      ip netns exec ${P}h$i nft -f - <<NFT
table inet nxr {
  chain in { type filter hook input priority 0; ip saddr { 10.79.0.1, 10.79.0.2 } drop; }
  chain out { type filter hook output priority 0; ip daddr { 10.79.0.1, 10.79.0.2 } drop; }
}
NFT
    done
    end_world
    unset NEXAR_RECOVERY_QUORUM
    if [ $q = majority ]; then
      local r ok=1
      for r in 0 1 2 3; do
        if [ "${RC[$r]}" != 6 ] || ! grep -q 'no majority' /tmp/$P.w$r; then
          ok=0
          fail "partition_majority: rank $r exited ${RC[$r]}, want ABORTED naming no majority"
          sed 's/^/    /' /tmp/$P.w$r | tail -n 4
        fi
      done
      [ $ok = 1 ] && echo "ok   partition_majority: all four ABORTED: $(grep -m1 'recover ->' /tmp/$P.w0 | cut -c1-140)"
    else
      check_views partition_survivors 0,1 0 1
      check_views partition_survivors 2,3 2 3
    fi
  done
}

scenario_soak() {
  local runs=${SOAK_RUNS:-4} k victim delay t s
  for k in $(seq "$runs"); do
    victim=${SOAK_VICTIM:-$((RANDOM % 4))}
    delay=$((200 + RANDOM % 1300))
    start_world soak$k 4 allreduce --count $((RANDOM % 2 ? 1024 : 1048576)) || continue
    sleep "$(awk "BEGIN {print $delay / 1000}")"
    t=$(now_ms)
    kill_rank $victim
    end_world
    s=()
    for r in 0 1 2 3; do [ $r = $victim ] || s+=($r); done
    check_detect soak$k "$t" 1500 PEER_LOST "${s[@]}" >/dev/null
    check_views "soak$k (victim $victim after ${delay} ms)" "" "${s[@]}"
  done
}

# scale (not in the default list): detection and recovery time against N
# (SCALE_NS, default "4 8 16"; needs NX_HOSTS >= the largest), SCALE_RUNS each
scenario_scale() {
  local n k victim t s r
  for n in ${SCALE_NS:-4 8 16}; do
    for k in $(seq "${SCALE_RUNS:-3}"); do
      victim=$((1 + RANDOM % (n - 1)))
      start_world scale${n}x $n allreduce || continue
      sleep 1
      t=$(now_ms)
      kill_rank $victim
      end_world
      s=()
      for r in $(seq 0 $((n - 1))); do [ $r = $victim ] || s+=($r); done
      check_detect "scale${n}x" "$t" 3000 PEER_LOST "${s[@]}" >/dev/null
      check_views "scale$n run $k (victim $victim)" "" "${s[@]}" | cut -c1-120
    done
  done
}

for s in $SCENARIOS; do
  echo "=== $s"
  case $s in
  coord_*) scenario_coord "${s#coord_}" ;;
  *) "scenario_$s" ;;
  esac
done
# detection and recovery times (median and worst) per scenario kind
awk '{k=$1; sub(/[0-9]+$/, "", k); d[k]=d[k] " " $3; r[k]=r[k] " " $5}
     END {for (k in d) print k, "detect(ms):" d[k], "| recover(ms):" r[k]}' "$STATS.keep"
exit $FAILED
