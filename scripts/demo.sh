#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main demo: an allreduce sweep
# with four ranks as processes (nexar-perf), after a seed/worker cluster
# exchanging messages and the point-to-point benchmark against plain TCP.
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
echo "== install (library, header, Python package) into /usr/local"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO cmake --install build --prefix /usr/local >/dev/null
$SUDO ldconfig 2>/dev/null || true
# Debian's /usr/bin/python3 imports from /usr/local/lib/python3.X/dist-packages.
# Another python3 first in PATH (pyenv, >= 3.11: the extension is abi3) gets a
# link to the package in its own site-packages.
py=$(command -v python3 || true)
if [ -n "$py" ] && [ "$py" != /usr/bin/python3 ] && ! (cd / && "$py" -c "import nexar" 2>/dev/null); then
  pkg=$(cd / && /usr/bin/python3 -c "import nexar, os; print(os.path.dirname(nexar.__file__))")
  site=$("$py" -c "import sys, sysconfig; print(sysconfig.get_paths()['platlib'] if sys.version_info >= (3, 11) else '')")
  if [ -n "$site" ]; then
    $SUDO mkdir -p "$site" && $SUDO ln -sfn "$pkg" "$site/nexar"
    echo "linked $pkg into $site for $py"
  fi
fi
echo "== Python: import nexar, then 4 ranks as processes"
(cd / && python3 -c "import nexar; print('import nexar:', nexar.__file__, 'libnexar', nexar.version())")
build/tools/nexar-run -n 4 -- /usr/bin/python3 examples/python/allreduce.py
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
