#!/usr/bin/env bash
# Device-buffer checks on a machine with a CUDA GPU (issue 13), <= 5 min:
#  1. nvidia-smi and the driver version;
#  2. the device correctness suite (tests/device/dev_test) with the
#     libnexar-cuda adapter on device 0: 4 ranks as threads (sync and event
#     adapters), then 2 processes;
#  3. device.cuda_smoke;
#  4. a 256 MiB f32 all_reduce at n = 2, device vs host buffers (target
#     <= 1.25x), and the adapter's H2D / D2H rates.
# Usage: scripts/gpu_check.sh [build-dir] (default build-gpu, configured
# and built here, RelWithDebInfo). Exits 2 with a message when there is no
# GPU; 1 when a check fails.
set -u
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no GPU (nvidia-smi missing or finds no device): nothing to check" >&2
  exit 2
fi
echo "== nvidia-smi"
nvidia-smi
echo "driver version: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
echo "== build ($B)"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXAR_PYTHON=OFF >"$B.cmake.log" 2>&1 ||
  { cat "$B.cmake.log"; exit 1; }
grep -i "libnexar-cuda" "$B.cmake.log"
cmake --build "$B" -j"$(nproc)" --target dev_test cuda_smoke device_cuda_bench >"$B.build.log" 2>&1 ||
  { tail -40 "$B.build.log"; exit 1; }
fail=0
run() { # name timeout command...
  local name=$1 t=$2
  shift 2
  local t0=$SECONDS
  timeout "$t" "$@"
  local rc=$?
  case $rc in
  0) echo "gpu_check: $name: ok ($((SECONDS - t0)) s)" ;;
  77) echo "gpu_check: $name: SKIPPED (no usable device?)"; fail=1 ;;
  124) echo "gpu_check: $name: TIMEOUT after $t s"; fail=1 ;;
  *) echo "gpu_check: $name: FAILED (rc $rc)"; fail=1 ;;
  esac
}
echo "== device.cuda_smoke"
run cuda_smoke 30 "$B/tests/cuda_smoke"
echo "== dev_test on CUDA device 0: 4 ranks as threads, synchronous adapter"
NEXAR_DEV_TEST_CUDA=0 run "dev_test threads" 60 "$B/tests/dev_test" threads
echo "== dev_test on CUDA device 0: 4 ranks as threads, event adapter"
NEXAR_DEV_TEST_CUDA=0 run "dev_test async" 30 "$B/tests/dev_test" async
echo "== dev_test on CUDA device 0: 2 processes"
NEXAR_DEV_TEST_CUDA=0 run "dev_test procs" 60 "$B/tests/dev_test" procs
echo "== 256 MiB f32 all_reduce, n = 2: device vs host buffers"
out=$(timeout 60 "$B/bench/device_cuda_bench" 256 0)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "gpu_check: device_cuda_bench: FAILED (rc $rc)"; fail=1; }
ratio=$(echo "$out" | sed -n 's/^ratio device\/host \([0-9.]*\).*/\1/p')
if [ -n "$ratio" ]; then
  if awk -v r="$ratio" 'BEGIN { exit !(r <= 1.25) }'; then
    echo "gpu_check: ratio $ratio <= 1.25: ok"
  else
    echo "gpu_check: ratio $ratio > 1.25: over target"
    fail=1
  fi
fi
[ $fail = 0 ] && echo "gpu_check: all ok" || echo "gpu_check: FAILED"
exit $fail
