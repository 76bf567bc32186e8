#!/usr/bin/env bash
# examples/elastic_train on loopback processes: whatever the membership, every
# rank that finishes prints the checksum of `elastic_train --reference`.
#   elastic_example_test.sh <nexar-seed> <nexar-run> <example_elastic_train> SECTION...
# Sections:
#   static   the reference is reproducible; option errors; options from the
#            environment; fixed worlds under nexar-run (1, 3, and 5 ranks for
#            a batch of 3, so that some ranks have no sample) and a world of 3
#            where a rank leaves: all equal to the reference.
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
cleanup() {
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

for s in "$@"; do
  case $s in
  static) section_static ;;
  *)
    echo "unknown section '$s'"
    exit 2
    ;;
  esac
done
echo "elastic_example_test: ok ($*)"
