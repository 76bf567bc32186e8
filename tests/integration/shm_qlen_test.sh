#!/usr/bin/env bash
# The lane's control datagrams under a full queue (issue 15): in a network
# namespace of its own whose AF_UNIX datagram queues hold one datagram
# (net.unix.max_dgram_qlen is per namespace, so nothing outside is touched),
# 9 ranks bring their lanes, rings and collective segment up and run
# shm_test's world: pings, pongs, ring and segment offers the peer's queue
# refuses with EAGAIN must be kept and sent again (nx_lane_send_ctl_owed_locked).
# The log must show such owed datagrams, or the test did not test that.
#   shm_qlen_test.sh <shm_test>
set -u
T=$1
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2"
  exit 77
fi
NS=nxqlen$$
ip netns add "$NS" || { echo "SKIP: cannot create a namespace"; exit 77; }
trap 'ip netns del "$NS" 2>/dev/null' EXIT
LOG=$(mktemp "${TMPDIR:-/tmp}/nxqlen.XXXXXX")
trap 'ip netns del "$NS" 2>/dev/null; rm -f "$LOG"' EXIT
ip -n "$NS" link set lo up
ip netns exec "$NS" sysctl -qw net.unix.max_dgram_qlen=1 ||
  { echo "SKIP: cannot set net.unix.max_dgram_qlen"; exit 77; }
NEXAR_DEBUG=debug timeout -s KILL 100 ip netns exec "$NS" "$T" 9 -1 >"$LOG" 2>&1
rc=$?
owed=$(grep -c 'control datagram .* owed' "$LOG")
up=$(grep -c 'lane to rank [0-9]* up' "$LOG")
echo "shm_test 9 with one-datagram queues: exit $rc, $owed control datagrams owed, $up lanes up"
if [ $rc != 0 ]; then
  grep -v DEBUG "$LOG" | tail -n 10
  echo "FAIL: shm_test 9 with one-datagram queues"
  exit 1
fi
if [ "$owed" = 0 ]; then
  echo "FAIL: no control datagram was refused, so the retry was not exercised"
  exit 1
fi
echo "ok: lanes under full queues"
