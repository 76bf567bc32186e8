#!/usr/bin/env bash
# The command-line tools with elastic membership, processes on loopback, with
# tests/integration/elastic_tool_worker as the workload (it checkpoints until the
# view has TARGET ranks, then allreduces over it).
#   elastic_tools_test.sh <nexar-seed> <nexar-run> <elastic_tool_worker> SECTION...
# Sections:
#   seed  nexar-seed --max-world: option errors and --print-config; a seed for
#         a world of 2 with --max-world 3 admits one of two joiners (the other
#         times out in its join); with --once the seed exits after formation,
#         the members' checkpoints go on without it and a later joiner fails.
#   run   nexar-run --join HOST:PORT: option errors (no token, --listen, a bad
#         address), the ranks' environment (no NEXAR_RANK/NEXAR_WORLD_SIZE),
#         and a world grown 2 -> 4 by two `nexar-run --join -n 2` against one
#         nexar-seed: the first forms the world, the second's copies join it.
# Every process runs under `timeout`; the script stops at the first failure.
set -u

[ $# -ge 4 ] || { echo "usage: elastic_tools_test.sh <nexar-seed> <nexar-run> <elastic_tool_worker> SECTION..."; exit 2; }
SEED=$1 RUN=$2 WORKER=$3
shift 3
for f in "$SEED" "$RUN" "$WORKER"; do
  [ -x "$f" ] || { echo "FAIL: $f is missing (build first)"; exit 1; }
done

TMP=$(mktemp -d)
BG_PIDS=()
# The background processes run under `timeout`, which passes SIGTERM on to
# the command (a SIGKILL would orphan it): TERM first, KILL what is left.
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# The caller's environment must not steer the tools.
unset NEXAR_SEED_ADDR NEXAR_CLUSTER_TOKEN NEXAR_CLUSTER_TOKEN_FILE NEXAR_RANK NEXAR_WORLD_SIZE \
  NEXAR_LOCAL_RANK NEXAR_ELASTIC_MAX_WORLD MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
export NEXAR_CONNECT_TIMEOUT_MS=20000

STEP=""
fail() {
  echo "FAIL [$STEP]: $*"
  for f in "$TMP"/*.out "$TMP"/*.err; do
    [ -s "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }
  done
  exit 1
}
step() {
  STEP=$1
  rm -f "$TMP"/*.out "$TMP"/*.err
  echo "== $STEP"
}

# expect_rc WANT LIMIT_S cmd...: runs cmd under timeout, checks its status.
expect_rc() {
  local want=$1 limit=$2
  shift 2
  timeout -k 5 "$limit" "$@" >"$TMP/cmd.out" 2>"$TMP/cmd.err"
  local rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want"
}

# start_seed ARGS...: a nexar-seed on 127.0.0.1 in the background; sets
# SEED_PID, ADDR and TOKEN (from its stdout).
start_seed() {
  timeout -k 5 120 "$SEED" --listen 127.0.0.1:0 "$@" >"$TMP/seed.out" 2>"$TMP/seed.err" &
  SEED_PID=$!
  BG_PIDS+=("$SEED_PID")
  ADDR="" TOKEN=""
  for _ in $(seq 100); do
    ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$TMP/seed.out")
    TOKEN=$(sed -n 's/^NEXAR_CLUSTER_TOKEN=//p' "$TMP/seed.out")
    [ -n "$ADDR" ] && [ -n "$TOKEN" ] && return 0
    kill -0 "$SEED_PID" 2>/dev/null || break
    sleep 0.1
  done
  fail "the seed printed no address and token"
}

# worker NAME ARGS...: one elastic_tool_worker joining the seed at ADDR (no rank or
# world size: the seed assigns the rank, or queues it once the world formed).
worker() {
  local name=$1
  shift
  NEXAR_SEED_ADDR=$ADDR NEXAR_CLUSTER_TOKEN=$TOKEN timeout -k 5 90 "$WORKER" "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.err" &
  BG_PIDS+=($!)
  LAST_PID=$!
}

# wait_joined NAME...: each worker has printed its "joined" line.
wait_joined() {
  local n
  for n in "$@"; do
    for _ in $(seq 300); do
      grep -q '^elastic_tool_worker: joined' "$TMP/$n.out" 2>/dev/null && break
      sleep 0.1
    done
    grep -q '^elastic_tool_worker: joined' "$TMP/$n.out" || fail "$n did not join"
  done
}

section_seed() {
  step "nexar-seed --max-world: option errors"
  expect_rc 2 10 "$SEED" --listen 127.0.0.1:0 --world-size 2 --max-world x
  grep -q -- '--max-world wants a number' "$TMP/cmd.err" || fail "no message for --max-world x"
  expect_rc 2 10 "$SEED" --listen 127.0.0.1:0 --world-size 2 --max-world
  expect_rc 2 10 "$SEED" --listen 127.0.0.1:0 --world-size 2 --max-world=-1
  expect_rc 0 10 "$SEED" --help
  grep -q -- '--max-world M' "$TMP/cmd.out" || fail "--help does not describe --max-world"
  grep -q 'keeps serving after formation' "$TMP/cmd.out" || fail "--help does not say it keeps serving"

  step "nexar-seed --max-world: --print-config, and the option wins over the variable"
  NEXAR_ELASTIC_MAX_WORLD=9 expect_rc 0 10 "$SEED" --print-config --max-world=3
  grep -qx 'NEXAR_ELASTIC_MAX_WORLD=3' "$TMP/cmd.out" || fail "elastic_max_world is not 3"
  NEXAR_ELASTIC_MAX_WORLD=9 expect_rc 0 10 "$SEED" --print-config
  grep -qx 'NEXAR_ELASTIC_MAX_WORLD=9' "$TMP/cmd.out" || fail "NEXAR_ELASTIC_MAX_WORLD ignored"

  step "nexar-seed --max-world 3: one of two joiners admitted into a world of 2"
  start_seed --world-size 2 --max-world 3
  grep -q 'at most 3 members' "$TMP/seed.err" || fail "the seed does not report its limit"
  worker m0 3 30
  local m0=$LAST_PID
  worker m1 3 30
  local m1=$LAST_PID
  wait_joined m0 m1
  NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS=5000 worker j0 3 30
  local j0=$LAST_PID
  NEXAR_ELASTIC_CHECKPOINT_TIMEOUT_MS=5000 worker j1 3 30
  local j1=$LAST_PID
  local rc_m0 rc_m1 rc_j0 rc_j1
  wait "$m0"; rc_m0=$?
  wait "$m1"; rc_m1=$?
  wait "$j0"; rc_j0=$?
  wait "$j1"; rc_j1=$?
  [ "$rc_m0$rc_m1" = 00 ] || fail "members exited $rc_m0 and $rc_m1, expected 0"
  case "$rc_j0$rc_j1" in
  04 | 40) ;;
  *) fail "joiners exited $rc_j0 and $rc_j1, expected one 0 (admitted), one 4 (join timed out)" ;;
  esac
  [ "$(cat "$TMP"/[mj]?.out | grep -c '^elastic_tool_worker: done rank [0-2] world 3 sum 3$')" = 3 ] ||
    fail "not three ranks of one world of 3"
  grep -q 'TIMEOUT.*no checkpoint admitted' "$TMP"/j?.out || fail "the refused joiner's error"
  grep -q 'joined pid [0-9]* rank 2 world 3 epoch 1 new 1' "$TMP"/j?.out ||
    fail "the admitted joiner is not rank 2 of 3 at epoch 1"
  kill -TERM "$SEED_PID"
  wait "$SEED_PID"
  local rc=$?
  [ "$rc" = 0 ] || fail "the seed exited $rc after SIGTERM, expected 0"
  echo "ok   one joiner admitted (world 3), the other: $(grep -h -o 'no checkpoint admitted[^(]*' "$TMP"/j?.out)"

  step "nexar-seed --once: exits after formation; checkpoints go on, nobody joins"
  start_seed --world-size 2 --once
  worker m0 3 4
  m0=$LAST_PID
  worker m1 3 4
  m1=$LAST_PID
  wait "$SEED_PID"
  rc=$?
  [ "$rc" = 0 ] || fail "the --once seed exited $rc, expected 0"
  NEXAR_CONNECT_TIMEOUT_MS=2000 worker j0 3 30
  j0=$LAST_PID
  wait "$j0"; rc_j0=$?
  wait "$m0"; rc_m0=$?
  wait "$m1"; rc_m1=$?
  # 3: the members ran checkpoints until their 4 s were up, without an error,
  # and ended in their world of 2
  [ "$rc_m0$rc_m1" = 33 ] || fail "members exited $rc_m0 and $rc_m1, expected 3 (world stays 2)"
  [ "$(cat "$TMP"/m?.out | grep -c '^elastic_tool_worker: done rank [01] world 2 sum 2$')" = 2 ] ||
    fail "the members did not finish in their world of 2"
  [ "$rc_j0" != 0 ] || fail "a joiner got in after the --once seed exited"
  echo "ok   --once: members kept their world of 2; the joiner: $(grep -o 'failed: .*' "$TMP/j0.out")"
}

section_run() {
  step "nexar-run --join: option errors"
  expect_rc 2 10 "$RUN" -n 2 --join 127.0.0.1:29500 -- true
  grep -q 'NEXAR_CLUSTER_TOKEN is not set' "$TMP/cmd.err" || fail "no message for a missing token"
  NEXAR_CLUSTER_TOKEN=t expect_rc 2 10 "$RUN" -n 2 --join 127.0.0.1:29500 --listen 127.0.0.1:0 -- true
  grep -q 'exclude each other' "$TMP/cmd.err" || fail "no message for --join with --listen"
  NEXAR_CLUSTER_TOKEN=t expect_rc 2 10 "$RUN" -n 2 --join 127.0.0.1:0 -- true
  NEXAR_CLUSTER_TOKEN=t expect_rc 2 10 "$RUN" -n 2 --join ::1:29500 -- true
  grep -q 'needs brackets' "$TMP/cmd.err" || fail "no message for a bare IPv6 address"
  NEXAR_CLUSTER_TOKEN=t expect_rc 2 10 "$RUN" -n 2 --join -- true
  expect_rc 0 10 "$RUN" --help
  grep -q -- '--join HOST:PORT' "$TMP/cmd.out" || fail "--help does not describe --join"

  step "nexar-run --join: the ranks' environment"
  local show='echo "$NEXAR_SEED_ADDR ${NEXAR_RANK-none} ${NEXAR_WORLD_SIZE-none} $NEXAR_LOCAL_RANK $NEXAR_CLUSTER_TOKEN"'
  NEXAR_CLUSTER_TOKEN=tok NEXAR_RANK=7 NEXAR_WORLD_SIZE=9 NEXAR_LOCAL_RANK=5 \
    expect_rc 0 10 "$RUN" -n 3 --join=seed.example:29500 -- sh -c "$show"
  [ "$(sort "$TMP/cmd.out" | tr '\n' ,)" = \
    "seed.example:29500 none none 0 tok,seed.example:29500 none none 1 tok,seed.example:29500 none none 2 tok," ] ||
    fail "unexpected environment: $(tr '\n' , <"$TMP/cmd.out")"

  step "nexar-run --join: the same process handling (a failure stops the others)"
  NEXAR_CLUSTER_TOKEN=tok expect_rc 137 20 "$RUN" -n 2 --join 127.0.0.1:9 -- \
    sh -c 'if [ "$NEXAR_LOCAL_RANK" = 1 ]; then kill -9 $$; else sleep 100; fi'
  grep -q 'local rank 1 (pid [0-9]*) killed by signal 9' "$TMP/cmd.err" || fail "the failure report"

  step "nexar-run --join: grow 2 -> 4 with two launchers against one nexar-seed"
  start_seed --world-size 2
  NEXAR_CLUSTER_TOKEN=$TOKEN timeout -k 5 90 "$RUN" -n 2 --join "$ADDR" -- "$WORKER" 4 40 \
    >"$TMP/a.out" 2>"$TMP/a.err" &
  local a=$! rc_a rc_b
  BG_PIDS+=("$a")
  for _ in $(seq 300); do
    [ "$(grep -c '^elastic_tool_worker: joined' "$TMP/a.out")" = 2 ] && break
    sleep 0.1
  done
  [ "$(grep -c '^elastic_tool_worker: joined .* world 2 epoch 0 new 0' "$TMP/a.out")" = 2 ] ||
    fail "the first launcher's ranks did not form a world of 2"
  NEXAR_CLUSTER_TOKEN=$TOKEN timeout -k 5 90 "$RUN" -n 2 --join "$ADDR" -- "$WORKER" 4 40 \
    >"$TMP/b.out" 2>"$TMP/b.err"
  rc_b=$?
  wait "$a"
  rc_a=$?
  [ "$rc_a$rc_b" = 00 ] || fail "the launchers exited $rc_a and $rc_b, expected 0"
  [ "$(grep -h -o '^elastic_tool_worker: done rank [0-3] world 4 sum 4$' "$TMP"/[ab].out | sort -u | wc -l)" = 4 ] ||
    fail "not ranks 0-3 of one world of 4"
  grep -q 'done rank [01] world 4' "$TMP/a.out" || fail "the first launcher's ranks are not 0 and 1"
  [ "$(grep -c 'joined .* rank [23] world [34] epoch [12] new 1' "$TMP/b.out")" = 2 ] ||
    fail "the second launcher's ranks did not join as new ranks 2 and 3"
  kill -TERM "$SEED_PID"
  wait "$SEED_PID"
  echo "ok   grown to 4: $(grep -h 'joined' "$TMP/b.out" | sed 's/elastic_tool_worker: joined pid [0-9]* //' | tr '\n' ';')"
}

for s in "$@"; do
  case $s in
  seed) section_seed ;;
  run) section_run ;;
  *)
    echo "unknown section '$s'"
    exit 2
    ;;
  esac
done
echo "elastic_tools_test: ok ($*)"
