#!/usr/bin/env bash
# Integration test of the command-line tools (nexar-run, nexar-seed) with the
# examples as workloads. Usage: bash tests/integration/tools_test.sh <build-dir>
# Every step runs under `timeout`; the script stops at the first failure.
set -u

BUILD=${1:?usage: tools_test.sh <build-dir>}
BUILD=$(cd "$BUILD" && pwd) || exit 1
RUN="$BUILD/tools/nexar-run"
SEED="$BUILD/tools/nexar-seed"
EX="$BUILD/examples"
for f in "$RUN" "$SEED" "$EX/example_seed_worker" "$EX/example_allreduce"; do
  [ -x "$f" ] || { echo "FAIL: $f is missing (build first)"; exit 1; }
done

TMP=$(mktemp -d)
BG_PIDS=()
cleanup() {
  for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# Keep the environment of the caller from steering the tools.
unset NEXAR_SEED_ADDR NEXAR_CLUSTER_TOKEN NEXAR_RANK NEXAR_WORLD_SIZE NEXAR_LOCAL_RANK \
  MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
# Fail fast rather than wait a minute for a world that cannot form.
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
now_ms() { date +%s%3N; }

# expect_rc WANT LIMIT_S cmd...: runs cmd under timeout, checks its status.
expect_rc() {
  local want=$1 limit=$2
  shift 2
  timeout -k 5 "$limit" "$@" >"$TMP/cmd.out" 2>"$TMP/cmd.err"
  local rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want"
}

# wait_for_line FILE PREFIX LIMIT_S PID: prints the value after PREFIX once FILE
# has such a line; fails if PID exits first or the limit passes.
wait_for_line() {
  local file=$1 prefix=$2 limit=$3 pid=$4 t=0 line
  while [ "$t" -lt $((limit * 10)) ]; do
    line=$(grep -m1 "^$prefix" "$file" 2>/dev/null)
    if [ -n "$line" ]; then
      echo "${line#"$prefix"}"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
    t=$((t + 1))
  done
  return 1
}

# ---------------------------------------------------------------- nexar-run
step "nexar-run: exit status of a failing rank"
expect_rc 3 20 "$RUN" -n 2 -- sh -c 'exit 3'

step "nexar-run: all ranks succeed"
expect_rc 0 20 "$RUN" -n 3 -- sh -c 'exit 0'

step "nexar-run: environment of the ranks"
SHOW_ENV='echo "$NEXAR_RANK $NEXAR_LOCAL_RANK $NEXAR_WORLD_SIZE'
SHOW_ENV+=' ${NEXAR_SEED_ADDR:+addr} ${NEXAR_CLUSTER_TOKEN:+tok}"'
timeout 20 "$RUN" -n 3 -- sh -c "$SHOW_ENV" >"$TMP/env.out" 2>"$TMP/env.err" ||
  fail "nexar-run exited $?"
[ "$(sort "$TMP/env.out" | tr '\n' ',')" = "0 0 3 addr tok,1 1 3 addr tok,2 2 3 addr tok," ] ||
  fail "unexpected environment: $(tr '\n' ',' <"$TMP/env.out")"

step "nexar-run: NEXAR_CLUSTER_TOKEN is passed on"
NEXAR_CLUSTER_TOKEN=tools-test-token timeout 20 "$RUN" -n 2 -- sh -c 'echo "$NEXAR_CLUSTER_TOKEN"' \
  >"$TMP/tok.out" 2>"$TMP/tok.err" || fail "nexar-run exited $?"
[ "$(sort -u "$TMP/tok.out")" = "tools-test-token" ] || fail "token not passed on"

step "nexar-run: a failure kills the other ranks"
t0=$(now_ms)
expect_rc 5 30 "$RUN" -n 2 -- sh -c 'if [ "$NEXAR_RANK" = 0 ]; then exit 5; else sleep 100; fi'
[ $(($(now_ms) - t0)) -lt 10000 ] || fail "took $(($(now_ms) - t0)) ms"

step "nexar-run: a rank killed by a signal gives 128+signal"
expect_rc 137 20 "$RUN" -n 2 -- \
  sh -c 'if [ "$NEXAR_RANK" = 1 ]; then kill -9 $$; else sleep 100; fi'

step "nexar-run: SIGKILL for a rank that ignores SIGTERM"
t0=$(now_ms)
expect_rc 7 30 "$RUN" -n 2 -- \
  sh -c 'trap "" TERM; if [ "$NEXAR_RANK" = 0 ]; then exit 7; fi; sleep 100'
[ $(($(now_ms) - t0)) -lt 10000 ] || fail "took $(($(now_ms) - t0)) ms"

step "nexar-run: --timeout"
t0=$(now_ms)
expect_rc 124 30 "$RUN" -n 2 --timeout 1 -- sleep 100
[ $(($(now_ms) - t0)) -lt 8000 ] || fail "took $(($(now_ms) - t0)) ms"

step "nexar-run: SIGTERM is forwarded to the ranks"
timeout 30 "$RUN" -n 2 -- sh -c 'echo $$ >"$0/rank$NEXAR_RANK.pid"; exec sleep 100' "$TMP" \
  >"$TMP/sig.out" 2>"$TMP/sig.err" &
RUN_PID=$!
BG_PIDS+=("$RUN_PID")
for _ in $(seq 100); do
  [ -s "$TMP/rank0.pid" ] && [ -s "$TMP/rank1.pid" ] && break
  sleep 0.1
done
[ -s "$TMP/rank1.pid" ] || fail "ranks did not start"
sleep 0.2
kill -TERM "$RUN_PID"
wait "$RUN_PID"
rc=$?
[ "$rc" = 143 ] || fail "nexar-run exited $rc after SIGTERM, expected 143"
for r in 0 1; do
  ! kill -0 "$(cat "$TMP/rank$r.pid")" 2>/dev/null || fail "rank $r survived"
done

step "nexar-run: a program that cannot be started"
expect_rc 127 20 "$RUN" -n 2 -- "$TMP/no-such-program"

step "nexar-run: usage errors"
expect_rc 2 10 "$RUN" -- true
expect_rc 2 10 "$RUN" -n 0 -- true
expect_rc 2 10 "$RUN" -n 2x -- true
expect_rc 2 10 "$RUN" -n 2

step "nexar-run: example_seed_worker, 3 ranks"
expect_rc 0 90 "$RUN" -n 3 -- "$EX/example_seed_worker"
[ "$(grep -c 'done' "$TMP/cmd.out")" = 3 ] || fail "not every rank reported done"

step "nexar-run: example_allreduce, 4 ranks"
expect_rc 0 120 "$RUN" -n 4 -- "$EX/example_allreduce"

for ex in send_recv rpc barrier broadcast allreduce; do
  [ -x "$EX/example_$ex" ] || continue
  step "example_$ex with its ranks as threads"
  expect_rc 0 120 "$EX/example_$ex"
done

step "example_seed_worker as its own launcher"
expect_rc 0 90 "$EX/example_seed_worker"

# --------------------------------------------------------------- nexar-seed
step "nexar-seed: usage and --print-config"
expect_rc 2 10 "$SEED" --listen 127.0.0.1:0
expect_rc 2 10 "$SEED" --world-size 2
expect_rc 2 10 "$SEED" --listen 127.0.0.1:0 --world-size 0
expect_rc 2 10 "$SEED" --bogus
expect_rc 0 10 "$SEED" --print-config
grep -q '^NEXAR_COLLECTIVE_TIMEOUT_MS=' "$TMP/cmd.out" || fail "--print-config printed no config"
NEXAR_COLLECTIVE_TIMEOUT_MS=1234 timeout 10 "$SEED" --print-config >"$TMP/pc.out" 2>&1 ||
  fail "--print-config failed"
grep -q '^NEXAR_COLLECTIVE_TIMEOUT_MS=1234$' "$TMP/pc.out" || fail "--print-config ignores env"
# every knob is in the table, environment-only ones too, and bounded
NEXAR_QUIC_CC=cubic NEXAR_LANE=0 timeout 10 "$SEED" --print-config >"$TMP/pc.out" 2>&1 ||
  fail "--print-config failed with knobs set"
for v in NEXAR_QUIC_CC=cubic NEXAR_LANE=0 NEXAR_DEBUG=off NEXAR_YIELD_US=auto NEXAR_SPIN_US=auto \
  NEXAR_REDUCE_IMPL=auto NEXAR_DUMP_ON_TIMEOUT=0 NEXAR_BULK_TCP_LOCAL=0 NEXAR_BULK_MIN_BYTES=auto \
  NEXAR_DEBUG_FILE= NEXAR_TEST_IMPAIR=; do
  grep -q "^$v" "$TMP/pc.out" || fail "--print-config lacks $v"
done
NEXAR_PIPELINE_SEGMENT_BYTES=1 timeout 10 "$SEED" --print-config >"$TMP/pc.out" 2>&1 &&
  fail "--print-config accepted NEXAR_PIPELINE_SEGMENT_BYTES=1"
grep -q "NEXAR_PIPELINE_SEGMENT_BYTES='1': out of range" "$TMP/pc.out" || fail "no range error"
NEXAR_YIELD_US=soon timeout 10 "$SEED" --print-config >"$TMP/pc.out" 2>&1 &&
  fail "--print-config accepted NEXAR_YIELD_US=soon"
grep -q "NEXAR_YIELD_US='soon'" "$TMP/pc.out" || fail "malformed knob not named"

step "nexar-seed --once with two workers"
timeout 60 "$SEED" --listen 127.0.0.1:0 --world-size 2 --once --token-file "$TMP/token" \
  --timeout-ms 45000 >"$TMP/seed.out" 2>"$TMP/seed.err" &
SEED_PID=$!
BG_PIDS+=("$SEED_PID")
ADDR=$(wait_for_line "$TMP/seed.out" NEXAR_SEED_ADDR= 20 "$SEED_PID") || fail "no address printed"
[ -s "$TMP/token" ] || fail "no token file"
[ "$(stat -c %a "$TMP/token")" = 600 ] || fail "token file mode $(stat -c %a "$TMP/token")"
! grep -q '^NEXAR_CLUSTER_TOKEN=' "$TMP/seed.out" || fail "token printed despite --token-file"
ls "$TMP"/token.* >/dev/null 2>&1 && fail "temporary token file left behind"
TOKEN=$(cat "$TMP/token")
W=()
for r in 0 1; do
  NEXAR_SEED_ADDR=$ADDR NEXAR_CLUSTER_TOKEN=$TOKEN NEXAR_WORLD_SIZE=2 \
    timeout 60 "$EX/example_seed_worker" >"$TMP/w$r.out" 2>"$TMP/w$r.err" &
  W+=($!)
  BG_PIDS+=($!)
done
for r in 0 1; do
  wait "${W[$r]}" || fail "worker $r exited $?"
done
wait "$SEED_PID"
rc=$?
[ "$rc" = 0 ] || fail "nexar-seed --once exited $rc"

step "nexar-seed prints a drawn token; a worker with a wrong token is refused"
timeout 60 "$SEED" --listen 127.0.0.1:0 --world-size 1 --once --timeout-ms 5000 \
  >"$TMP/seed.out" 2>"$TMP/seed.err" &
SEED_PID=$!
BG_PIDS+=("$SEED_PID")
ADDR=$(wait_for_line "$TMP/seed.out" NEXAR_SEED_ADDR= 20 "$SEED_PID") || fail "no address printed"
TOKEN=$(wait_for_line "$TMP/seed.out" NEXAR_CLUSTER_TOKEN= 5 "$SEED_PID") || fail "no token printed"
[ "${#TOKEN}" -ge 16 ] || fail "drawn token '$TOKEN' is short"
NEXAR_SEED_ADDR=$ADDR NEXAR_CLUSTER_TOKEN="not-$TOKEN" NEXAR_CONNECT_TIMEOUT_MS=4000 \
  timeout 30 "$EX/example_seed_worker" >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
[ "$rc" != 0 ] || fail "a worker with a wrong token joined"
[ "$rc" != 124 ] || fail "a worker with a wrong token hung"
grep -q NEXAR_ERR_AUTH "$TMP/bad.err" || fail "the refusal is not NEXAR_ERR_AUTH"
wait "$SEED_PID"
rc=$?
[ "$rc" = 124 ] || fail "nexar-seed --once without a world exited $rc, expected 124"

step "nexar-seed daemon stops on SIGTERM"
timeout 30 "$SEED" --listen 127.0.0.1:0 --world-size 3 >"$TMP/seed.out" 2>"$TMP/seed.err" &
SEED_PID=$!
BG_PIDS+=("$SEED_PID")
wait_for_line "$TMP/seed.out" NEXAR_SEED_ADDR= 20 "$SEED_PID" >/dev/null || fail "no address"
kill -TERM "$SEED_PID"
wait "$SEED_PID"
rc=$?
[ "$rc" = 0 ] || fail "nexar-seed exited $rc after SIGTERM, expected 0"

echo "tools_test: all steps passed"
