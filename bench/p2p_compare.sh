#!/usr/bin/env bash
# libnexar point-to-point against plain TCP, interleaved in one run, medians:
#   bench/p2p_compare.sh [build-dir] [repetitions]
# 64-byte ping-pong round trip and one-way bandwidth of 64 MiB messages,
# two processes each; QUIC path (NEXAR_BULK_TRANSPORT=0) and the default
# (same-host rendezvous for large messages).
set -eu
B=${1:-build}
N=${2:-5}
run=$B/tools/nexar-run
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
: > /tmp/nx_cmp.$$
for i in $(seq "$N"); do
  $run -n 2 -- "$B/bench/p2p_bench" pingpong 64 10000 | sed -n 's/.*round trip \([0-9.]*\) us mean.*/nx_rtt \1/p'
  "$B/bench/tcp_bench" pingpong 64 10000 | sed -n 's/.*round trip \([0-9.]*\) us.*/tcp_rtt \1/p'
  NEXAR_BULK_TRANSPORT=0 $run -n 2 -- "$B/bench/p2p_bench" bw 67108864 8 | sed -n 's/.*: \([0-9.]*\) GB\/s.*/nx_quic_bw \1/p'
  $run -n 2 -- "$B/bench/p2p_bench" bw 67108864 8 | sed -n 's/.*: \([0-9.]*\) GB\/s.*/nx_bw \1/p'
  "$B/bench/tcp_bench" bw 67108864 8 | sed -n 's/.*: \([0-9.]*\) GB\/s.*/tcp_bw \1/p'
done >> /tmp/nx_cmp.$$
for k in nx_rtt tcp_rtt nx_quic_bw nx_bw tcp_bw; do
  printf '%-11s median %s  (all: %s)\n' "$k" "$(grep "^$k " /tmp/nx_cmp.$$ | cut -d' ' -f2 | med)" \
    "$(grep "^$k " /tmp/nx_cmp.$$ | cut -d' ' -f2 | tr '\n' ' ')"
done
rm -f /tmp/nx_cmp.$$
