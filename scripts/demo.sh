#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo: an allreduce sweep
# with four ranks as processes (nexar-perf), after a seed/worker cluster
# exchanging messages and the point-to-point benchmark against plain TCP.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
echo "== 4 ranks as processes: seed, join, ring of messages, barrier"
build/tools/nexar-run -n 4 -- build/examples/example_seed_worker
echo "== 4 ranks as processes: allreduce"
build/tools/nexar-run -n 4 -- build/examples/example_allreduce
echo "== point-to-point between 2 processes (QUIC) and the TCP baseline"
build/tools/nexar-run -n 2 -- build/bench/p2p_bench pingpong 64 5000
build/bench/tcp_bench pingpong 64 5000
build/tools/nexar-run -n 2 -- build/bench/p2p_bench bw 67108864 8
build/bench/tcp_bench bw 67108864 8
echo "== allreduce sweep, 4 ranks as processes"
build/tools/nexar-perf all_reduce --procs -n 4 -b 8 -e 64M -f 4
