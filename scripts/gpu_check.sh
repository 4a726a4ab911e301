#!/usr/bin/env bash
# One-shot check on a GPU machine: configure a fresh Release build, build the CUDA test suite,
# run every test labelled `cuda`, and copy the logs under $OUT (or ./gpu-check-logs).
#   bash scripts/gpu_check.sh [build-dir]          (default build-gpu)
# Environment: JOBS (default: nproc), CTEST_ARGS (extra ctest arguments, e.g. "-R CudaSampling").
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build-gpu}"
out="${OUT:-$repo/gpu-check-logs}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$out"
cd "$repo"

{
  echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) (+ working tree)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2 || true
  cmake --version | head -n 1
} | tee "$out/environment.txt"

status=0
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPARK_BUILD_BENCH=OFF \
    >"$out/configure.log" 2>&1; then
  echo "configure FAILED (tail of $out/configure.log):"; tail -n 40 "$out/configure.log"; exit 2
fi
start=$(date +%s)
if ! ninja -C "$build" -j "$jobs" dspark_cuda_tests >"$out/build.log" 2>&1; then
  echo "build FAILED (errors from $out/build.log):"
  grep -E "error|FAILED" "$out/build.log" | head -n 60
  exit 3
fi
echo "build: $(( $(date +%s) - start )) s"

start=$(date +%s)
# shellcheck disable=SC2086
ctest --test-dir "$build" -L cuda --output-on-failure --timeout 300 -j 4 ${CTEST_ARGS:-} \
  >"$out/ctest.log" 2>&1 || status=$?
echo "ctest: $(( $(date +%s) - start )) s, exit $status"
# The summary, then the first lines of every failure, short enough for a terminal.
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout|Not Run|\(Failed\)|Skipped" \
  "$out/ctest.log" | head -n 60
grep -A 7 -E ": Failure|what\(\)|Exception" "$out/ctest.log" | head -n 150
cp -f "$build/Testing/Temporary/LastTest.log" "$out/" 2>/dev/null || true
exit "$status"
