#!/usr/bin/env bash
# examples/elastic_train on loopback processes: whatever the membership, every
# rank that finishes prints the checksum of `elastic_train --reference`.
#   elastic_example_test.sh <nexar-seed> <nexar-run> <example_elastic_train> SECTION...
# Sections:
#   static   the reference is reproducible; option errors; options from the
#            environment; fixed worlds under nexar-run (1, 3, and 5 ranks for
#            a batch of 3, so that some ranks have no sample) and a world of 3
#            where a rank leaves: all equal to the reference.
#   elastic  one nexar-seed (world 2) and two `nexar-run --join -n 2`, the
#            second started once the first's world has formed: the world grows
#            2 -> 4 at step 20 (--wait-world 4:20), rank 2 (a joiner) leaves at
#            step 60 (4 -> 3), rank 2 (the other joiner) is killed with
#            SIGKILL at step 120 and the survivors recover (3 -> 2); the two
#            that finish print the reference checksum, and every view change
#            is the expected one on every rank.
# Every process runs under `timeout`; the script stops at the first failure.
set -u

[ $# -ge 4 ] || {
  echo "usage: elastic_example_test.sh <nexar-seed> <nexar-run> <example_elastic_train> SECTION..."
  exit 2
}
SEED=$1 RUN=$2 TRAIN=$3
shift 3

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

# The caller's environment must not steer the tools or the example.
unset NEXAR_SEED_ADDR NEXAR_CLUSTER_TOKEN NEXAR_CLUSTER_TOKEN_FILE NEXAR_RANK NEXAR_WORLD_SIZE \
  NEXAR_LOCAL_RANK NEXAR_ELASTIC_MAX_WORLD MASTER_ADDR MASTER_PORT RANK WORLD_SIZE \
  ELASTIC_STEPS ELASTIC_EVERY ELASTIC_BATCH ELASTIC_LEAVE ELASTIC_KILL ELASTIC_WAIT_WORLD \
  ELASTIC_WAIT_MS ELASTIC_STEP_MS
export NEXAR_CONNECT_TIMEOUT_MS=20000

STEP=""
fail() {
  echo "FAIL [$STEP]: $*"
  for f in "$TMP"/*.out "$TMP"/*.err; do
    [ -s "$f" ] && { echo "--- $f"; tail -n 25 "$f"; }
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

# reference ARGS...: prints the reference checksum for those options.
reference() {
  timeout 60 "$TRAIN" --reference "$@" | sed -n 's/^elastic_train: reference steps [0-9]* checksum \([0-9a-f]\{16\}\) .*/\1/p'
}

# check_sums FILE N WANT: FILE has N rank checksum lines, every one WANT.
check_sums() {
  local file=$1 n=$2 want=$3 got
  got=$(grep -c '^elastic_train: rank [0-9]*/[0-9]*: steps [0-9]* checksum ' "$file")
  [ "$got" = "$n" ] || fail "$got ranks printed a checksum, expected $n"
  got=$(sed -n 's/^elastic_train: rank [0-9]*\/[0-9]*: steps [0-9]* checksum \([0-9a-f]*\) .*/\1/p' "$file" | sort -u)
  [ "$got" = "$want" ] || fail "checksums '$(echo $got)', expected the reference $want"
}

section_static() {
  step "elastic_train --reference is reproducible"
  local ref ref20
  ref=$(reference)
  [ -n "$ref" ] || fail "no reference checksum"
  [ "$(reference)" = "$ref" ] || fail "two references differ"
  ref20=$(reference --steps 20)
  [ -n "$ref20" ] && [ "$ref20" != "$ref" ] || fail "20 and 200 steps give the same checksum"
  [ "$(ELASTIC_STEPS=20 reference)" = "$ref20" ] || fail "ELASTIC_STEPS=20 is not --steps 20"
  [ "$(ELASTIC_STEPS=7 reference --steps 20)" = "$ref20" ] || fail "the option does not win"
  echo "ok   reference $ref (200 steps), $ref20 (20 steps)"

  step "elastic_train: option errors"
  expect_rc 2 10 "$TRAIN" --reference --every 0
  expect_rc 2 10 "$TRAIN" --reference --leave 3
  expect_rc 2 10 "$TRAIN" --reference --kill x:5
  expect_rc 2 10 "$TRAIN" --reference --wait-world 4:15
  grep -q 'multiple of --every' "$TMP/cmd.err" || fail "no message for a --wait-world step off the checkpoints"
  expect_rc 2 10 "$TRAIN" --reference --bogus 1
  expect_rc 2 10 "$TRAIN" --reference --steps
  ELASTIC_BATCH=abc expect_rc 2 10 "$TRAIN" --reference
  grep -q 'from ELASTIC_BATCH' "$TMP/cmd.err" || fail "the message does not name ELASTIC_BATCH"

  step "elastic_train: fixed worlds of 1 and 3 give the reference"
  expect_rc 0 60 "$RUN" -n 1 -- "$TRAIN"
  check_sums "$TMP/cmd.out" 1 "$ref"
  expect_rc 0 60 "$RUN" -n 3 -- "$TRAIN"
  check_sums "$TMP/cmd.out" 3 "$ref"

  step "elastic_train: 5 ranks for a batch of 3 (two ranks without a sample)"
  local ref3
  ref3=$(reference --batch 3 --steps 40)
  expect_rc 0 60 "$RUN" -n 5 -- "$TRAIN" --batch 3 --steps 40
  check_sums "$TMP/cmd.out" 5 "$ref3"

  step "elastic_train: a world of 3, rank 1 leaves at step 30"
  expect_rc 0 60 "$RUN" -n 3 -- "$TRAIN" --leave 1:30
  check_sums "$TMP/cmd.out" 2 "$ref"
  grep -q '^elastic_train: rank 1/3: left at step 30' "$TMP/cmd.out" || fail "rank 1 did not leave at step 30"
  echo "ok   3 -> 2 by a leave: $ref"
}

section_elastic() {
  step "elastic_train: grow 2 -> 4, a leave, a kill; the survivors match the reference"
  local args=(--steps 200 --every 10 --wait-world 4:20 --leave 2:60 --kill 2:120) ref
  ref=$(reference "${args[@]}")
  [ -n "$ref" ] || fail "no reference checksum"
  timeout -k 5 200 "$SEED" --listen 127.0.0.1:0 --world-size 2 >"$TMP/seed.out" 2>"$TMP/seed.err" &
  local seed=$! addr="" token=""
  BG_PIDS+=("$seed")
  for _ in $(seq 100); do
    addr=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$TMP/seed.out")
    token=$(sed -n 's/^NEXAR_CLUSTER_TOKEN=//p' "$TMP/seed.out")
    [ -n "$addr" ] && [ -n "$token" ] && break
    sleep 0.1
  done
  [ -n "$addr" ] && [ -n "$token" ] || fail "the seed printed no address and token"
  # a dead rank is noticed within about a second
  export NEXAR_CLUSTER_TOKEN=$token NEXAR_HEARTBEAT_INTERVAL_MS=200 NEXAR_HEARTBEAT_TIMEOUT_MS=1000
  timeout -k 5 120 "$RUN" --join "$addr" -n 2 -- "$TRAIN" "${args[@]}" >"$TMP/a.out" 2>"$TMP/a.err" &
  local a=$! rc_a rc_b
  BG_PIDS+=("$a")
  for _ in $(seq 300); do
    [ "$(grep -c ' started at step 0 (epoch 0)$' "$TMP/a.out")" = 2 ] && break
    sleep 0.1
  done
  [ "$(grep -c ' started at step 0 (epoch 0)$' "$TMP/a.out")" = 2 ] ||
    fail "the first launcher's ranks did not form a world of 2"
  sleep 0.5 # "a bit later": the members are training or waiting at step 20
  timeout -k 5 120 "$RUN" --join "$addr" -n 2 -- "$TRAIN" "${args[@]}" >"$TMP/b.out" 2>"$TMP/b.err"
  rc_b=$?
  wait "$a"
  rc_a=$?
  unset NEXAR_CLUSTER_TOKEN NEXAR_HEARTBEAT_INTERVAL_MS NEXAR_HEARTBEAT_TIMEOUT_MS
  # the first launcher: both ranks finish; the second: one leaves (0), the
  # other is killed, which is the launcher's status
  [ "$rc_a" = 0 ] || fail "the first launcher exited $rc_a, expected 0"
  [ "$rc_b" = 137 ] || fail "the second launcher exited $rc_b, expected 137 (its killed rank)"
  grep -q '^nexar-run: local rank [01] (pid [0-9]*) killed by signal 9' "$TMP/b.err" ||
    fail "the second launcher does not report its killed rank"
  grep -q 'terminating the' "$TMP/b.err" && fail "the second launcher terminated a rank"
  check_sums "$TMP/a.out" 2 "$ref"
  local r
  for r in 0 1; do
    # the views a surviving member went through, in order; the joiners come
    # in at one checkpoint or (arriving further apart) at two, both at step 20
    local want want2 got
    want="started 0 epoch 0;resized 20 epoch 1 2->4 j2 l0;resized 60 epoch 2 4->3 j0 l1;"
    want+="recovered epoch 3 redo 120;done 2"
    want2="started 0 epoch 0;resized 20 epoch 1 2->3 j1 l0;resized 20 epoch 2 3->4 j1 l0;"
    want2+="resized 60 epoch 3 4->3 j0 l1;recovered epoch 4 redo 120;done 2"
    got=$(sed -n -e "s/^elastic_train: rank $r\/2: pid [0-9]* started at step \([0-9]*\) (epoch \([0-9]*\))/started \1 epoch \2/p" \
      -e "s/^elastic_train: rank $r\/[0-9]*: step \([0-9]*\): resized at epoch \([0-9]*\): \([0-9]*\) -> \([0-9]*\) ranks (joined \([0-9]*\), left \([0-9]*\); was rank $r)/resized \1 epoch \2 \3->\4 j\5 l\6/p" \
      -e "s/^elastic_train: rank $r\/2: recovered at epoch \([0-9]*\); redo from step \([0-9]*\)/recovered epoch \1 redo \2/p" \
      -e "s/^elastic_train: rank $r\/\([0-9]*\): steps 200 checksum .*/done \1/p" "$TMP/a.out" | paste -sd ';')
    [ "$got" = "$want" ] || [ "$got" = "$want2" ] ||
      fail "rank $r went through '$got', expected '$want' or '$want2'"
  done
  [ "$(grep -c '^elastic_train: rank [23]/[34]: pid [0-9]* joined at step 20 (epoch [12])$' "$TMP/b.out")" = 2 ] ||
    fail "the second launcher's ranks did not join as ranks 2 and 3 at step 20"
  grep -q '^elastic_train: rank 2/4: left at step 60' "$TMP/b.out" || fail "rank 2 did not leave at step 60"
  grep -q '^elastic_train: rank 2/3: step 60: resized at epoch [23]: 4 -> 3 ranks (joined 0, left 1; was rank 3)' \
    "$TMP/b.out" || fail "the other joiner did not become rank 2 of 3"
  grep -q '^elastic_train: rank 2/3: kills itself at step 120' "$TMP/b.out" || fail "rank 2 did not kill itself at step 120"
  grep -q 'checksum' "$TMP/b.out" && fail "a rank of the second launcher finished"
  kill -TERM "$seed"
  wait "$seed"
  local rc=$?
  [ "$rc" = 0 ] || fail "the seed exited $rc after SIGTERM, expected 0"
  echo "ok   2 -> 4 -> 3 (leave) -> 2 (kill, recover): both survivors $ref = reference"
}

for s in "$@"; do
  case $s in
  static) section_static ;;
  elastic) section_elastic ;;
  *)
    echo "unknown section '$s'"
    exit 2
    ;;
  esac
done
echo "elastic_example_test: ok ($*)"
