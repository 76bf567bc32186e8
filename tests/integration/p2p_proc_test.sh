#!/usr/bin/env bash
# Point-to-point checks with one process per rank, launched by nexar-run.
# Usage: p2p_proc_test.sh <nexar-run> <p2p_test binary>
# p2p_test sees NEXAR_SEED_ADDR, joins with nexar_init_from_env and runs the
# same checks as in its threads mode, from its own rank's point of view.
set -u

RUN=${1:?usage: p2p_proc_test.sh <nexar-run> <p2p_test>}
BIN=${2:?usage: p2p_proc_test.sh <nexar-run> <p2p_test>}
for f in "$RUN" "$BIN"; do
  [ -x "$f" ] || { echo "FAIL: $f is not an executable (build first)"; exit 1; }
done

# The caller's environment must not steer the launch.
unset NEXAR_SEED_ADDR NEXAR_CLUSTER_TOKEN NEXAR_RANK NEXAR_WORLD_SIZE NEXAR_LOCAL_RANK \
  MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
# Short timeouts, so a failure shows in seconds rather than minutes.
export NEXAR_COLLECTIVE_TIMEOUT_MS=5000
export NEXAR_BARRIER_TIMEOUT_MS=5000
export NEXAR_RPC_TIMEOUT_MS=5000
export NEXAR_CONNECT_TIMEOUT_MS=20000

status=0
for n in 2 4; do
  echo "=== p2p_test as $n processes"
  start=$(date +%s)
  timeout -k 5 60 "$RUN" -n "$n" --timeout 50 -- "$BIN" "$n"
  rc=$?
  end=$(date +%s)
  if [ "$rc" -eq 0 ]; then
    echo "=== world $n: passed in $((end - start)) s"
  else
    if [ "$rc" -eq 124 ]; then
      echo "FAIL: world $n timed out (exit $rc)"
    else
      echo "FAIL: world $n exited with status $rc"
    fi
    status=1
  fi
done
exit $status
