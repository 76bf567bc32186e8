#!/usr/bin/env bash
# IPv6 with one process per rank, over ::1:
#   ipv6_proc_test.sh <build-dir>
# - nexar-run --listen [::1]:0 running p2p_test (seed and ranks over IPv6);
# - nexar-seed --listen [::1]:0 and three mesh_workers joining [::1]:port
#   (the seed's log must show them advertising [::1] addresses);
# - torchrun variables with MASTER_ADDR=::1;
# - a dual-stack worker (NEXAR_BIND_ADDR=[::]:0) in an IPv4 world, and in a
#   mixed IPv4/IPv6 world (without it: a clear error naming the fix);
# - malformed addresses (bare IPv6) refused at once, with the bracketed form.
# Skips (77) without IPv6 loopback.
set -u
BUILD=${1:?usage: ipv6_proc_test.sh <build-dir>}
BUILD=$(cd "$BUILD" && pwd) || exit 1
RUN=$BUILD/tools/nexar-run SEED=$BUILD/tools/nexar-seed
P2P=$BUILD/tests/p2p_test MESH=$BUILD/tests/mesh_worker
for f in "$RUN" "$SEED" "$P2P" "$MESH"; do
  [ -x "$f" ] || { echo "FAIL: $f is missing (build first)"; exit 1; }
done
python3 -c "import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).bind(('::1', 0))" \
  2>/dev/null || { echo "SKIP: no IPv6 loopback"; exit 77; }

unset NEXAR_SEED_ADDR NEXAR_CLUSTER_TOKEN NEXAR_RANK NEXAR_WORLD_SIZE NEXAR_LOCAL_RANK \
  NEXAR_BIND_ADDR MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
export NEXAR_COLLECTIVE_TIMEOUT_MS=10000 NEXAR_BARRIER_TIMEOUT_MS=10000 NEXAR_RPC_TIMEOUT_MS=10000
export NEXAR_CONNECT_TIMEOUT_MS=15000
TMP=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL [$STEP]: $*"
  for f in "$TMP"/*; do [ -s "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }; done
  exit 1
}
STEP=""
step() { STEP=$1; rm -f "$TMP"/*; echo "== $STEP"; }

# start_seed LISTEN WORLD: a nexar-seed in the background; sets ADDR and NEXAR_CLUSTER_TOKEN.
start_seed() {
  NEXAR_DEBUG=info timeout 60 "$SEED" --listen "$1" --world-size "$2" --once --timeout-ms 40000 \
    >"$TMP/seed.out" 2>"$TMP/seed.err" &
  SEEDPID=$!
  PIDS+=($SEEDPID)
  for _ in $(seq 100); do grep -q '^NEXAR_SEED_ADDR=' "$TMP/seed.out" && break; sleep 0.1; done
  ADDR=$(sed -n 's/^NEXAR_SEED_ADDR=//p' "$TMP/seed.out")
  export NEXAR_CLUSTER_TOKEN=$(sed -n 's/^NEXAR_CLUSTER_TOKEN=//p' "$TMP/seed.out")
  [ -n "$ADDR" ] && [ -n "$NEXAR_CLUSTER_TOKEN" ] || fail "the seed did not start"
}

# workers N [env...]: N mesh_workers joining $ADDR, each with the env; all must pass.
workers() {
  local n=$1 i pids=() rc=0
  shift
  for i in $(seq "$n"); do
    env NEXAR_SEED_ADDR="$ADDR" NEXAR_WORLD_SIZE="$n" "$@" timeout 40 "$MESH" \
      >"$TMP/w$i.out" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  [ "$rc" = 0 ] || fail "a worker failed"
  grep -h "ok" "$TMP"/w*.out
  wait "$SEEDPID" || fail "the seed exited $?"
}

step "nexar-run --listen [::1]:0: p2p_test as 2 processes"
timeout -k 5 90 "$RUN" -n 2 --listen '[::1]:0' --timeout 80 -- "$P2P" 2 >"$TMP/run.out" 2>&1 ||
  fail "nexar-run exited $?"
tail -n 1 "$TMP/run.out"

step "nexar-run --listen with a bare IPv6 address is refused"
timeout 10 "$RUN" -n 1 --listen '::1:0' -- true >"$TMP/bad.out" 2>&1 && fail "accepted ::1:0"
grep -q '\[::1\]:0' "$TMP/bad.out" || fail "no bracketed suggestion: $(cat "$TMP/bad.out")"

step "nexar-seed --listen [::1]:0, three workers joining it"
start_seed '[::1]:0' 3
case $ADDR in "[::1]:"*) ;; *) fail "seed address $ADDR" ;; esac
workers 3
n=$(grep -c 'seed: \[::1\]:[0-9]* joined' "$TMP/seed.err")
[ "$n" = 3 ] || fail "$n of 3 workers advertised an [::1] address"

step "nexar-seed at [::1], workers with the bulk TCP path (TLS) over IPv6"
start_seed '[::1]:0' 2
workers 2 NEXAR_BULK_TCP_LOCAL=1 MESH_WANT_BULK=2

step "torchrun variables with MASTER_ADDR=::1"
. "$(dirname "$0")/port_lib.sh"
port=$(free_port) || exit 1
pids=()
for r in 0 1; do
  env MASTER_ADDR=::1 MASTER_PORT=$port RANK=$r WORLD_SIZE=2 NEXAR_CLUSTER_TOKEN=ipv6-torchrun-tok \
    timeout 40 "$MESH" >"$TMP/t$r.out" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a torchrun-mode worker failed"; done
grep -h ok "$TMP"/t*.out

step "a dual-stack worker (NEXAR_BIND_ADDR=[::]:0) in an IPv4 world"
start_seed '127.0.0.1:0' 2
env NEXAR_SEED_ADDR="$ADDR" NEXAR_WORLD_SIZE=2 NEXAR_BIND_ADDR='[::]:0' NEXAR_BULK_TCP_LOCAL=1 \
  MESH_WANT_BULK=2 timeout 40 "$MESH" >"$TMP/d1.out" 2>&1 &
d1=$!
env NEXAR_SEED_ADDR="$ADDR" NEXAR_WORLD_SIZE=2 NEXAR_BULK_TCP_LOCAL=1 MESH_WANT_BULK=2 \
  timeout 40 "$MESH" >"$TMP/d2.out" 2>&1 || fail "the IPv4 worker failed"
wait $d1 || fail "the dual-stack worker failed"
wait "$SEEDPID" || fail "the seed exited $?"
grep -h ok "$TMP"/d*.out

step "a mixed world (seed on [::], one worker over IPv4, one over IPv6): dual stack"
start_seed '[::]:0' 2
port=${ADDR##*:}
env NEXAR_SEED_ADDR=127.0.0.1:$port NEXAR_WORLD_SIZE=2 NEXAR_BIND_ADDR='[::]:0' \
  NEXAR_BULK_TCP_LOCAL=1 MESH_WANT_BULK=2 timeout 40 "$MESH" >"$TMP/m1.out" 2>&1 &
m1=$!
env NEXAR_SEED_ADDR="[::1]:$port" NEXAR_WORLD_SIZE=2 NEXAR_BULK_TCP_LOCAL=1 MESH_WANT_BULK=2 \
  timeout 40 "$MESH" >"$TMP/m2.out" 2>&1 || fail "the IPv6 worker failed"
wait $m1 || fail "the IPv4 (dual-stack) worker failed"
wait "$SEEDPID" || fail "the seed exited $?"
grep -h ok "$TMP"/m*.out

step "the same without a dual-stack socket: the IPv4 worker says what to do"
start_seed '[::]:0' 2
port=${ADDR##*:}
env NEXAR_SEED_ADDR=127.0.0.1:$port NEXAR_WORLD_SIZE=2 NEXAR_CONNECT_TIMEOUT_MS=4000 \
  timeout 40 "$MESH" >"$TMP/m1.out" 2>&1 &
m1=$!
env NEXAR_SEED_ADDR="[::1]:$port" NEXAR_WORLD_SIZE=2 NEXAR_CONNECT_TIMEOUT_MS=4000 \
  timeout 40 "$MESH" >"$TMP/m2.out" 2>&1 && fail "a v4-only worker reached a v6 one"
wait $m1 && fail "the IPv4-only worker formed a world with an IPv6 peer"
grep -q 'no IPv4 address.*\[::\]:port (NEXAR_BIND_ADDR)' "$TMP/m1.out" || fail "no clear error"
cat "$TMP/m1.out"
wait "$SEEDPID"

step "a bare IPv6 seed address is refused at once, naming the form to use"
out=$(NEXAR_SEED_ADDR=::1:5000 NEXAR_CLUSTER_TOKEN=x timeout 10 "$MESH" 2>&1) && fail "joined ::1:5000"
case $out in *"[::1]:5000"*INVALID*|*INVALID*"[::1]:5000"*) ;; *) fail "message: $out" ;; esac
out=$(NEXAR_BIND_ADDR=::1:0 timeout 10 "$P2P" 2 2>&1) && fail "bound ::1:0"
case $out in *NEXAR_BIND_ADDR*"[::1]:0"*) ;; *) fail "message: $out" ;; esac
echo "ipv6_proc_test: all steps passed"
