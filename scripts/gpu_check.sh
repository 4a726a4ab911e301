#!/usr/bin/env bash
# One-shot check on a GPU machine: configure a fresh Release build, build the CUDA test suite,
# run the tests labelled `cuda`, and copy the logs under $OUT (or ./gpu-check-logs).
#   bash scripts/gpu_check.sh [build-dir]             the whole tree, ctest -L cuda (build-gpu)
#   bash scripts/gpu_check.sh --ops-only [build-dir]  only core + backend + ops and the op
#                                                     consistency tests (tests/cuda/<op>_test.cpp):
#                                                     quick, and immune to unrelated breakage
#   bash scripts/gpu_check.sh --fetch-debs            (here, with network) see below
# Environment: JOBS (default: nproc), EXTRA_TARGETS (more ninja targets, e.g. "dspark bench_spec";
# set DSPARK_BUILD_BENCH=ON for the bench targets), CTEST_ARGS (extra ctest arguments, e.g. "-R CudaSampling"),
# GTEST_FILTER (--ops-only), DSPARK_FORCE_DEPS_ROOT=1 (use the unpacked packages even where the
# system has them), DSPARK_CONFIGURE_ONLY=1 (stop after configuring).
#
# The GPU machines have nvcc and CMake but not our Debian C++ dependencies, and no network:
# `--fetch-debs` downloads the Debian packages into .carry/debs (git-ignored; pass `.carry` in the
# device tool's `carry`). On a machine without libpcre2-8 the script unpacks them into
# <build-dir>/deps-root (never into /) and points CMake, pkg-config and the loader at it.
# Their host compiler is GCC 13 (ours is GCC 12): GCC 13's libstdc++ no longer includes <cstdint>
# and <cstdio> from other headers, so unless g++-12 is there, <cstdint>, <cstddef> and <cstdio> are
# force-included and -fpermissive is added; such builds use DSPARK_WERROR=OFF (GCC 13 warns where
# GCC 12 does not).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debs="$repo/.carry/debs"
if [ "${1:-}" = "--fetch-debs" ]; then
  mkdir -p "$debs" && cd "$debs" &&
    apt-get download libpcre2-dev libpcre2-8-0 liblzma-dev liblzma5 libfmt-dev libfmt9 \
      libcli11-dev libgtest-dev nlohmann-json3-dev \
      libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libbrotli1 ||
    exit $?
  # libssl-dev's static libraries (9 MB unpacked, 2.2 MB of the 2.4 MB package) are not linked:
  # repacked without them, the packages stay within the device tool's working-tree budget.
  for f in libssl-dev_*.deb; do
    tmp="$(mktemp -d)" && dpkg-deb -R "$f" "$tmp/p" && find "$tmp/p" -name "*.a" -delete &&
      rm -rf "$tmp/p/usr/share/doc" "$tmp/p/usr/share/man" && dpkg-deb -Zxz -b "$tmp/p" "$f" >/dev/null
    rm -rf "$tmp"
  done
  exit 0
fi
ops_only=""
if [ "${1:-}" = "--ops-only" ]; then
  ops_only=1
  shift
fi
build="${1:-build-gpu}"
out="${OUT:-$repo/gpu-check-logs}"
jobs="${JOBS:-$(nproc)}"
mkdir -p "$out" "$repo/$build"
cd "$repo"

{
  echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) (+ working tree)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  nvcc --version 2>&1 | tail -n 2 || true
  cmake --version | head -n 1
  g++ --version | head -n 1
} | tee "$out/environment.txt"

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPARK_BUILD_BENCH=${DSPARK_BUILD_BENCH:-OFF})
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
    "-Dfmt_DIR=$lib/cmake/fmt" "-DGTest_DIR=$lib/cmake/GTest" "-DCLI11_DIR=$root/usr/share/cmake/CLI11")
  # OpenBLAS is optional (the CPU ops fall back to dspark's own kernel): leaving its three
  # packages (11.7 MB) out of .carry/debs keeps the device tool's working-tree budget.
  if [ -f "$lib/openblas-pthread/libopenblas.so" ]; then
    cmake_args+=("-DOPENBLAS_LIB=$lib/openblas-pthread/libopenblas.so"
      "-DOPENBLAS_INCLUDE=$root/usr/include/x86_64-linux-gnu/openblas-pthread")
  else
    cmake_args+=("-DOPENBLAS_LIB=OPENBLAS_LIB-NOTFOUND" "-DOPENBLAS_INCLUDE=OPENBLAS_INCLUDE-NOTFOUND")
  fi
  echo "dependencies: unpacked $(ls "$debs"/*.deb | wc -l) Debian packages into $root"
fi

gcc_major="$(g++ -dumpversion 2>/dev/null | cut -d. -f1)"
if [ "${gcc_major:-0}" -ge 13 ]; then
  if command -v g++-12 >/dev/null 2>&1; then
    cmake_args+=(-DCMAKE_CXX_COMPILER=g++-12 -DCMAKE_CUDA_HOST_COMPILER=g++-12)
    echo "compiler: g++-12 (g++ is GCC $gcc_major)"
  else
    cmake_args+=(-DDSPARK_WERROR=OFF
      "-DCMAKE_CXX_FLAGS=-include cstdint -include cstddef -include cstdio -fpermissive"
      "-DCMAKE_CUDA_FLAGS=-include cstdint -include cstddef -include cstdio -Xcompiler=-fpermissive")
    echo "compiler: GCC $gcc_major with <cstdint>/<cstddef>/<cstdio> force-included and -fpermissive"
  fi
fi

source_dir="."
if [ -n "$ops_only" ]; then
  # A small project over the same sources: the library's core, backend and ops, and the op
  # consistency tests (not the model / io / server code or their tests).
  source_dir="$build/ops-only"
  mkdir -p "$source_dir"
  tests=""
  for family in embedding norm matmul activation rope softmax sampling attention; do
    tests="$tests \${REPO}/tests/cuda/${family}_test.cpp"
  done
  cat >"$source_dir/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(dspark_ops_check LANGUAGES CXX)
set(REPO "$repo")
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY \${CMAKE_BINARY_DIR}/bin)
include(\${REPO}/cmake/cuda.cmake)
include(\${REPO}/cmake/warnings.cmake)
include(\${REPO}/cmake/dependencies.cmake)
file(GLOB_RECURSE SOURCES \${REPO}/src/dspark/core/*.cpp \${REPO}/src/dspark/backend/*.cpp
     \${REPO}/src/dspark/ops/*.cpp \${REPO}/src/dspark/backend/cuda/*.cu)
list(FILTER SOURCES EXCLUDE REGEX ".*_stub\\\\.cpp$")
add_library(dspark_lib STATIC \${SOURCES})
target_include_directories(dspark_lib PUBLIC \${REPO}/src)
target_compile_definitions(dspark_lib PUBLIC DSPARK_WITH_CUDA=1)
target_link_libraries(dspark_lib PUBLIC dspark_deps)
dspark_set_warnings(dspark_lib)
dspark_configure_cuda_target(dspark_lib)
find_package(GTest REQUIRED)
add_executable(dspark_cuda_tests \${REPO}/tests/common/test_util.cpp $tests)
target_include_directories(dspark_cuda_tests PRIVATE \${REPO}/tests)
target_compile_definitions(dspark_cuda_tests PRIVATE DSPARK_TEST_DATA_DIR="\${REPO}/tests/data"
                           DSPARK_SOURCE_DIR="\${REPO}" DSPARK_BINARY_DIR="\${CMAKE_BINARY_DIR}")
target_link_libraries(dspark_cuda_tests PRIVATE dspark_lib GTest::gtest_main)
CMAKE
fi

if ! cmake -S "$source_dir" -B "$build" "${cmake_args[@]}" >"$out/configure.log" 2>&1; then
  echo "configure FAILED (tail of $out/configure.log):"; tail -n 40 "$out/configure.log"; exit 2
fi
[ -n "${DSPARK_CONFIGURE_ONLY:-}" ] && { echo "configured $build"; exit 0; }
start=$(date +%s)
# shellcheck disable=SC2086
if ! ninja -C "$build" -k 0 -j "$jobs" dspark_cuda_tests ${EXTRA_TARGETS:-} >"$out/build.log" 2>&1; then
  echo "build FAILED (errors from $out/build.log):"
  grep -E "error|FAILED" "$out/build.log" | head -n 60
  exit 3
fi
echo "build: $(( $(date +%s) - start )) s"

status=0
start=$(date +%s)
if [ -n "$ops_only" ]; then
  "$build/bin/dspark_cuda_tests" --gtest_filter="${GTEST_FILTER:-*}" >"$out/tests.log" 2>&1 ||
    status=$?
  echo "tests: $(( $(date +%s) - start )) s, exit $status"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|tests? ran" "$out/tests.log" | head -n 60
  grep -B 1 -A 6 -E ": Failure|what\(\)" "$out/tests.log" | head -n 150
  exit "$status"
fi
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
