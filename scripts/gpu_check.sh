#!/usr/bin/env bash
# One-shot check on a GPU machine: configure a fresh Release build, build the CUDA test suite,
# run every test labelled `cuda`, and copy the logs under $OUT (or ./gpu-check-logs).
#   bash scripts/gpu_check.sh [build-dir]          (default build-gpu)
# Environment: JOBS (default: nproc), CTEST_ARGS (extra ctest arguments, e.g. "-R CudaSampling"),
# DSPARK_FORCE_DEPS_ROOT=1 (use the unpacked packages even where the system has them),
# DSPARK_CONFIGURE_ONLY=1 (stop after configuring).
#
# The GPU machines have nvcc and CMake but not our Debian C++ dependencies and no network. Run
#   bash scripts/gpu_check.sh --fetch-debs
# here first: it downloads the Debian packages into .carry/debs (git-ignored; pass `.carry` in the
# device tool's `carry`). On a machine without libpcre2-8 the script unpacks them into
# <build-dir>/deps-root (never into /) and points CMake, pkg-config and the loader at it. That
# build uses DSPARK_WERROR=OFF: the machine's GCC 13 warns where our GCC 12 does not.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debs="$repo/.carry/debs"
if [ "${1:-}" = "--fetch-debs" ]; then
  mkdir -p "$debs" && cd "$debs" &&
    apt-get download libpcre2-dev libpcre2-8-0 liblzma-dev liblzma5 libopenblas-dev \
      libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 libfmt-dev libfmt9 \
      libcli11-dev libgtest-dev nlohmann-json3-dev
  exit $?
fi
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

cmake_args=(-DCMAKE_BUILD_TYPE=Release -DDSPARK_BUILD_BENCH=OFF)
if [ -n "${DSPARK_FORCE_DEPS_ROOT:-}" ] || ! pkg-config --exists libpcre2-8 2>/dev/null; then
  [ -d "$debs" ] || { echo "missing C++ dependencies and no $debs (run --fetch-debs)"; exit 2; }
  root="$repo/$build/deps-root"
  lib="$root/usr/lib/x86_64-linux-gnu"
  mkdir -p "$root"
  for f in "$debs"/*.deb; do dpkg -x "$f" "$root"; done
  export PKG_CONFIG_PATH="$lib/pkgconfig:$root/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  export CPATH="$root/usr/include${CPATH:+:$CPATH}" LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
  cmake_args+=(-DDSPARK_WERROR=OFF "-DCMAKE_PREFIX_PATH=$root/usr"
    "-Dfmt_DIR=$lib/cmake/fmt" "-DGTest_DIR=$lib/cmake/GTest" "-DCLI11_DIR=$root/usr/share/cmake/CLI11"
    "-DOPENBLAS_LIB=$lib/openblas-pthread/libopenblas.so"
    "-DOPENBLAS_INCLUDE=$root/usr/include/x86_64-linux-gnu/openblas-pthread")
  echo "dependencies: unpacked $(ls "$debs"/*.deb | wc -l) Debian packages into $root"
fi

status=0
if ! cmake -S . -B "$build" -G Ninja "${cmake_args[@]}" >"$out/configure.log" 2>&1; then
  echo "configure FAILED (tail of $out/configure.log):"; tail -n 40 "$out/configure.log"; exit 2
fi
[ -n "${DSPARK_CONFIGURE_ONLY:-}" ] && { echo "configured $build"; exit 0; }
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
