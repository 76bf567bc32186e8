#!/usr/bin/env bash
# Unauthenticated QUIC handshakes must not slow or stop a world (3 ranks as
# processes on 127.0.0.1, fixed ports so the attacker knows them):
#  1. a steady flood of valid client Initials (fresh connection ids every
#     10 s) while the world runs allreduce + point-to-point iterations: the
#     best attacked rate stays >= 90% of the best unattacked one of the same
#     run, or the median of the medians, or the median of each pair's ratio
#     (runs alternate; on a shared box other load only lowers rates, so best
#     and median are the estimates, and this VM's two states, which last
#     seconds, shift whole runs: a pair's two runs share one more often);
#  2. a 4000/s flood during formation: the world still forms, in about its
#     normal time.
# Usage: hs_attack_test.sh <nexar-run> <hs_worker> <initial_flood>
set -u
RUN=${1:?}; W=${2:?}; FLOOD=${3:?}
for f in "$RUN" "$W" "$FLOOD"; do [ -x "$f" ] || { echo "FAIL: $f missing"; exit 1; }; done
unset NEXAR_SEED_ADDR NEXAR_CLUSTER_TOKEN NEXAR_RANK NEXAR_WORLD_SIZE NEXAR_LOCAL_RANK \
  MASTER_ADDR MASTER_PORT RANK WORLD_SIZE NEXAR_BIND_ADDR
export NEXAR_CONNECT_TIMEOUT_MS=15000 NEXAR_COLLECTIVE_TIMEOUT_MS=20000
# The flood is aimed at QUIC, so the world's traffic stays on QUIC: over the
# same-host shared-memory rings 3 processes on 2 cores swing between 9,000
# and 43,000 it/s from one identical run to the next (measured), which no
# 90% rate comparison survives; on QUIC they stay within ~10%.
export NEXAR_SHM=0
PAIRS=${HS_PAIRS:-5}
RATE_PPS=${HS_FLOOD_PPS:-300}
port=$((20000 + ($$ * 7) % 30000))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# one world run; prints "formed <s> rate <it/s>" or nothing
# waits until the flood (output in $tmp/fl) has made its Initials
flood_ready() {
  for _ in $(seq 1 100); do grep -q ready "$tmp/fl" 2>/dev/null && return 0; sleep 0.1; done
  echo "FAIL: the flood did not start"; return 1
}
world() {
  HS_BASE_PORT=$1 HS_SECONDS=${2:-2} timeout -k 5 60 "$RUN" -n 3 --timeout 50 -- "$W" 2>"$tmp/err" |
    grep '^formed' || { tail -5 "$tmp/err" >&2; true; }
}
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print 0}'; }
best() { sort -n | tail -1; }

status=0
: >"$tmp/base"; : >"$tmp/att"; : >"$tmp/fbase"; : >"$tmp/pair"
for i in $(seq 1 "$PAIRS"); do
  port=$((port + 10))
  out=$(world $port); echo "unattacked: $out"
  echo "$out" | awk '{print $4}' >>"$tmp/base"; echo "$out" | awk '{print $2}' >>"$tmp/fbase"
  port=$((port + 10))
  "$FLOOD" "$RATE_PPS" 8 64 $port $((port + 1)) $((port + 2)) >"$tmp/fl" &
  fp=$!
  flood_ready || status=1
  out=$(world $port); echo "attacked ($RATE_PPS Initials/s): $out"
  kill "$fp" 2>/dev/null; wait "$fp" 2>/dev/null
  echo "$out" | awk '{print $4}' >>"$tmp/att"
  paste -d' ' <(tail -1 "$tmp/base") <(tail -1 "$tmp/att") |
    awk 'NF == 2 && $1 > 0 {print $2 / $1}' >>"$tmp/pair"
done
b=$(grep -v '^$' "$tmp/base" | best); a=$(grep -v '^$' "$tmp/att" | best)
mb=$(grep -v '^$' "$tmp/base" | median); ma=$(grep -v '^$' "$tmp/att" | median)
echo "median rate: unattacked $mb it/s, attacked $ma it/s"
echo "best rate: unattacked $b it/s, attacked $a it/s"
mp=$(grep -v '^$' "$tmp/pair" | median)
echo "median of the pairs' attacked/unattacked: $mp"
# one lucky unattacked run on a loaded box must not fail it: any estimate
# holding 90% passes (before admission control all were below 50%)
if ! awk -v a="$a" -v b="$b" -v ma="$ma" -v mb="$mb" -v mp="$mp" \
  'BEGIN {exit !((b > 0 && a >= 0.9 * b) || (mb > 0 && ma >= 0.9 * mb) || mp >= 0.9)}'; then
  echo "FAIL: attacked rate $a < 90% of $b (medians $ma, $mb; pairs $mp)"; status=1
fi

# 2: formation under 4000 Initials/s
fb=$(grep -v '^$' "$tmp/fbase" | median)
port=$((port + 10))
"$FLOOD" 4000 10 256 $port $((port + 1)) $((port + 2)) >"$tmp/fl" &
fp=$!
flood_ready || status=1
sleep 0.5
out=$(world $port 1); echo "formation under 4000 Initials/s: $out"
kill "$fp" 2>/dev/null; wait "$fp" 2>/dev/null
fa=$(echo "$out" | awk '{print $2}')
if [ -z "$fa" ]; then
  echo "FAIL: the world did not form under the flood"; status=1
elif ! awk -v a="$fa" -v b="$fb" 'BEGIN {exit !(a <= b * 3 + 1.0)}'; then
  echo "FAIL: formation took $fa s under the flood (unattacked median $fb s)"; status=1
else
  echo "formation: $fa s under the flood, $fb s unattacked"
fi
exit $status
