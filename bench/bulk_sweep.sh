#!/usr/bin/env bash
# Where large messages should leave QUIC for the bulk TCP stream: one-way
# bandwidth of p2p_bench (two processes) per size, medians of N runs, for
#   quic   QUIC only (NEXAR_BULK_TRANSPORT=0)
#   tls    the TCP stream with TLS (NEXAR_BULK_TCP_LOCAL=1 treats the two
#          processes as separate hosts; NEXAR_BULK_MIN_BYTES=0 forces it)
#   plain  the same without encryption (NEXAR_ENCRYPT_BULK=0)
#   shm    the default between ranks of one host (process_vm_readv)
#   bench/bulk_sweep.sh [build-dir] [runs] > bench/results/bulk/sweep.md
set -eu
B=${1:-build}
N=${2:-3}
run=$B/tools/nexar-run
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
bw() { "$@" 2>/dev/null | sed -n 's/.*: \([0-9.]*\) GB\/s.*/\1/p' | tail -1; }
echo "| size | iters | quic GB/s | tls GB/s | plain GB/s | shm GB/s | tls/quic | plain/quic |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for s in 262144 524288 1048576 2097152 4194304 16777216 67108864; do
  it=$((268435456 / s)); [ $it -gt 400 ] && it=400; [ $it -lt 8 ] && it=8
  q=() t=() p=() m=()
  for _ in $(seq "$N"); do
    q+=("$(NEXAR_BULK_TRANSPORT=0 bw $run -n 2 -- "$B/bench/p2p_bench" bw $s $it)")
    t+=("$(NEXAR_BULK_TCP_LOCAL=1 NEXAR_BULK_MIN_BYTES=0 bw $run -n 2 -- "$B/bench/p2p_bench" bw $s $it)")
    p+=("$(NEXAR_ENCRYPT_BULK=0 NEXAR_BULK_TCP_LOCAL=1 NEXAR_BULK_MIN_BYTES=0 \
      bw $run -n 2 -- "$B/bench/p2p_bench" bw $s $it)")
    m+=("$(bw $run -n 2 -- "$B/bench/p2p_bench" bw $s $it)")
  done
  Q=$(printf '%s\n' "${q[@]}" | med) T=$(printf '%s\n' "${t[@]}" | med)
  P=$(printf '%s\n' "${p[@]}" | med) M=$(printf '%s\n' "${m[@]}" | med)
  echo "| $s | $it | $Q | $T | $P | $M | $(awk "BEGIN{printf \"%.2f\", $T/$Q}") | $(awk "BEGIN{printf \"%.2f\", $P/$Q}") |"
done
