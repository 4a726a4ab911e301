#!/usr/bin/env bash
# Build, test and benchmark dspark on a GPU machine (docs/performance.md).
#
#   scripts/gpu.sh fetch-debs               here, with network: the Debian C++ packages that the
#                                           GPU machines lack, into .carry/debs
#   scripts/gpu.sh test [CTEST_ARGS...]     build dspark_cuda_tests, run `ctest -L cuda`
#   scripts/gpu.sh bench [ROUND_ARGS...]    build dspark and the benchmarks, write the random
#                                           qwen3-8b target and qwen3-8b-dspark-b16 drafter, run
#                                           the reference round benchmark, print its table
#   scripts/gpu.sh compare BASE [N] [ROUND_ARGS...]
#                                           bench_round of BASE's tree (a directory, or a .tar.gz
#                                           of one) and of this one, run alternately (base, head)
#                                           N times (default 2) as separate processes; one table
#                                           of medians
#   scripts/gpu.sh ab PATCH [N] [ROUND_ARGS...]
#                                           one build of this tree, then PATCH applied (git apply)
#                                           and rebuilt incrementally: bench_round without and
#                                           with it, N pairs (default 3) alternating the order
#                                           (base, head; head, base; ...); one table of medians.
#                                           AB_TEST=1: then `ctest -L cuda` on the patched tree.
#                                           The patch stays applied in this (the machine's) tree
#   scripts/gpu.sh all                      test, then bench
#   scripts/gpu.sh configure [BUILD_DIR]    only configure the Release build (for other scripts)
#
# ROUND_ARGS are appended to the reference command, e.g. `--draft-fp8 --draft-vocab FILE`.
#
# The GPU machines have nvcc, CMake and Ninja but neither our Debian packages nor network: run
# `scripts/gpu.sh fetch-debs` here first, and name `.carry` (git-ignored) in the device tool's
# `carry`. Where libpcre2-8 is missing the packages are unpacked into BUILD_DIR/deps-root (never
# into /). For `compare`, carry the base tree in .carry too, made here with
#   git archive --format=tar.gz ae46487 -- . ':(exclude)models' ':(exclude)tests/data' \
#     > .carry/base.tar.gz                                                     (or any REV)
# (3.6 MB, where the whole tree would not fit the device tool's 64 MiB with this one) and run
# `scripts/gpu.sh compare .carry/base.tar.gz 2` on the GPU machine.
#
# ROUND_GGUF=SHAPE:MIX[:LAYERS] (e.g. llama3.1-8b:Q4_K_M, qwen3-30b-a3b:BF16:12): `bench`,
# `compare` and `ab` time a random GGUF target of that shape and llama.cpp quantization mix
# (tools/synth/make_random_gguf.py; LAYERS: only the first that many layers) without a
# drafter, `--verify-k 16 --graphs --context 1024`, instead of the reference pair. The writer
# needs the `gguf` package, which `fetch-debs` also downloads into .carry/py.
#
# Environment: OUT (logs and JSON, default gpu-logs; packed into one gpu-out-PID.tar.gz at exit
# when it holds more than 8 files, the most the device tool returns), JOBS (default nproc), BUILD
# (default build-gpu), MODELS (random checkpoints, default /tmp/dspark-models), ROUND_TIMEOUT
# (seconds per bench_round process, default 150), EXTRA_TARGETS (more ninja targets),
# DSPARK_FORCE_DEPS_ROOT=1 (the unpacked packages even where the system has them).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 2
debs="$repo/.carry/debs"
build="${BUILD:-build-gpu}"
jobs="${JOBS:-$(nproc)}"
models="${MODELS:-/tmp/dspark-models}"
t0=$(date +%s)

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//'; }

fetch_debs() {
  mkdir -p "$debs" && cd "$debs" &&
    apt-get download libpcre2-dev libpcre2-8-0 liblzma-dev liblzma5 libfmt-dev libfmt9 \
      libcli11-dev libgtest-dev nlohmann-json3-dev \
      libcpp-httplib-dev libcpp-httplib0.11 libssl-dev zlib1g-dev libbrotli-dev libbrotli1 ||
    return 1
  # libssl-dev without its static libraries (never linked): the device tool's tree budget.
  local f tmp
  for f in libssl-dev_*.deb; do
    tmp="$(mktemp -d)" && dpkg-deb -R "$f" "$tmp/p" && find "$tmp/p" -name "*.a" -delete &&
      rm -rf "$tmp/p/usr/share/doc" "$tmp/p/usr/share/man" && dpkg-deb -Zxz -b "$tmp/p" "$f" >/dev/null
    rm -rf "$tmp"
  done
  echo "$(find . -name '*.deb' | wc -l) packages in $debs"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$repo/.carry/py" gguf &&
    echo "the gguf wheel in $repo/.carry/py"
}

pack_out() {  # the device tool returns at most 8 files from $OUT
  [ "$(find "$out" -type f | wc -l)" -gt 8 ] || return 0
  (cd "$out" && find . -type f ! -name 'gpu-out-*.tar.gz' -printf '%P\n' |
    tar czf "gpu-out-$$.tar.gz" -T - --remove-files) &&
    find "$out" -mindepth 1 -type d -empty -delete && echo "packed $out into gpu-out-$$.tar.gz"
}

# CMake's arguments, once: Release with the benchmarks, the unpacked Debian packages where the
# machine lacks them, the GCC 13 workarounds.
cmake_args=()
deps_env() {
  [ ${#cmake_args[@]} -gt 0 ] && return 0
  cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPARK_BUILD_BENCH=ON -DDSPARK_CUDA=ON)
  if [ -n "${DSPARK_FORCE_DEPS_ROOT:-}" ] || ! pkg-config --exists libpcre2-8 2>/dev/null; then
    [ -d "$debs" ] || { echo "no C++ dependencies and no $debs (scripts/gpu.sh fetch-debs)"; return 2; }
    local root="$build/deps-root" f
    [[ "$build" = /* ]] || root="$repo/$root"
    local lib="$root/usr/lib/x86_64-linux-gnu"
    mkdir -p "$root"
    for f in "$debs"/*.deb; do dpkg -x "$f" "$root"; done
    export PKG_CONFIG_PATH="$lib/pkgconfig:$root/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
    export CPATH="$root/usr/include${CPATH:+:$CPATH}" LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
    cmake_args+=(-DDSPARK_WERROR=OFF "-DCMAKE_PREFIX_PATH=$root/usr" "-Dfmt_DIR=$lib/cmake/fmt"
      "-DGTest_DIR=$lib/cmake/GTest" "-DCLI11_DIR=$root/usr/share/cmake/CLI11")
    # OpenBLAS is optional (the CPU ops fall back to dspark's own kernel) and not carried.
    if [ -f "$lib/openblas-pthread/libopenblas.so" ]; then
      cmake_args+=("-DOPENBLAS_LIB=$lib/openblas-pthread/libopenblas.so"
        "-DOPENBLAS_INCLUDE=$root/usr/include/x86_64-linux-gnu/openblas-pthread")
    else
      cmake_args+=(-DOPENBLAS_LIB=OPENBLAS_LIB-NOTFOUND -DOPENBLAS_INCLUDE=OPENBLAS_INCLUDE-NOTFOUND)
    fi
    echo "dependencies: $(find "$debs" -name '*.deb' | wc -l) Debian packages unpacked into $root"
  fi
  # GCC 13 (the GPU image's; ours is 12) no longer pulls in <cstdint> / <cstdio> through other
  # headers, and warns where GCC 12 does not.
  local gcc_major
  gcc_major="$(g++ -dumpversion 2>/dev/null | cut -d. -f1)"
  if [ "${gcc_major:-0}" -ge 13 ]; then
    if command -v g++-12 >/dev/null 2>&1; then
      cmake_args+=(-DCMAKE_CXX_COMPILER=g++-12 -DCMAKE_CUDA_HOST_COMPILER=g++-12)
    else
      local inc="-include cstdint -include cstddef -include cstdio"
      cmake_args+=(-DDSPARK_WERROR=OFF "-DCMAKE_CXX_FLAGS=$inc -fpermissive"
        "-DCMAKE_CUDA_FLAGS=$inc -Xcompiler=-fpermissive")
      echo "compiler: GCC $gcc_major, <cstdint>/<cstddef>/<cstdio> force-included, -fpermissive"
    fi
  fi
}

configure() {  # SRC_DIR BUILD_DIR LOG
  deps_env || return $?
  cmake -S "$1" -B "$2" "${cmake_args[@]}" >"$out/$3.log" 2>&1 && return 0
  echo "configure of $1 FAILED (tail of $out/$3.log):"
  tail -n 40 "$out/$3.log"
  return 2
}

build_targets() {  # SRC_DIR BUILD_DIR LOG TARGET...
  local src=$1 dir=$2 log=$3 start
  shift 3
  configure "$src" "$dir" "configure-$log" || return $?
  start=$(date +%s)
  # shellcheck disable=SC2086
  if ! ninja -C "$dir" -k 0 -j "$jobs" "$@" ${EXTRA_TARGETS:-} >"$out/build-$log.log" 2>&1; then
    echo "build in $dir FAILED (errors from $out/build-$log.log):"
    grep -E "error|FAILED" "$out/build-$log.log" | head -n 60
    return 3
  fi
  echo "built $* in $dir: $(($(date +%s) - start)) s"
}

run_tests() {  # CTEST_ARGS...
  build_targets . "$build" tests dspark_cuda_tests || return $?
  local status=0 start
  start=$(date +%s)
  ctest --test-dir "$build" -L cuda --output-on-failure --timeout 300 -j 4 "$@" \
    >"$out/ctest.log" 2>&1 || status=$?
  echo "ctest: $(($(date +%s) - start)) s, exit $status"
  grep -E "tests passed|tests failed|\*\*\*Failed|Timeout|Not Run|\(Failed\)|Skipped" \
    "$out/ctest.log" | head -n 60
  grep -A 7 -E ": Failure|what\(\)|Exception" "$out/ctest.log" | head -n 150
  return "$status"
}

random_checkpoints() {  # tools/synth: speed does not depend on the weights' values
  local s
  if [ -n "${ROUND_GGUF:-}" ]; then
    local shape mix layers=() parts
    IFS=: read -r -a parts <<<"$ROUND_GGUF"
    shape=${parts[0]} mix=${parts[1]:-}
    [ -n "${parts[2]:-}" ] && layers=(--layers "${parts[2]}")
    if [ -z "$shape" ] || [ -z "$mix" ] || [ ${#parts[@]} -gt 3 ]; then
      echo "ROUND_GGUF must be SHAPE:MIX[:LAYERS] (got '$ROUND_GGUF')"
      return 4
    fi
    gguf_model="$models/${ROUND_GGUF//:/-}.gguf"
    [ -f "$gguf_model" ] && return 0
    if ! python3 -c "import gguf" 2>/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/dspark-site \
        "$repo"/.carry/py/gguf-*.whl && export PYTHONPATH="/tmp/dspark-site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    mkdir -p "$models" && timeout 300 python3 tools/synth/make_random_gguf.py \
      --shape "$shape" --mix "$mix" "${layers[@]}" --out "$gguf_model" 2>&1 | tail -n 1
    [ -f "$gguf_model" ] || { echo "no random GGUF $gguf_model (ROUND_GGUF=$ROUND_GGUF)"; return 4; }
    return 0
  fi
  mkdir -p "$models/tok"
  [ -f "$models/tok/tokenizer.json" ] || python3 -c "import lzma, sys
open(sys.argv[2], 'wb').write(lzma.open(sys.argv[1]).read())" \
    tests/data/tokenizers/qwen3/tokenizer.json.xz "$models/tok/tokenizer.json"
  for s in qwen3-8b qwen3-8b-dspark-b16; do
    [ -f "$models/$s/config.json" ] || timeout 200 python3 tools/synth/make_random_checkpoint.py \
      --shape "$s" --out "$models/$s" --tokenizer "$models/tok" 2>&1 | tail -n 1
    [ -f "$models/$s/config.json" ] || { echo "no random checkpoint $models/$s"; return 4; }
  done
}

round() {  # BENCH_ROUND NAME [ROUND_ARGS...]: the reference round benchmark, $out/NAME.json
  local bin=$1 name=$2 rc=0
  shift 2
  echo "== $name ($(($(date +%s) - t0)) s)"
  local ref=(-m "$models/qwen3-8b" --device cuda --rounds 32 --verify-k "16,32" --draft
    "$models/qwen3-8b-dspark-b16" --gamma 16 --graphs --graphs-only)
  [ -n "${ROUND_GGUF:-}" ] &&
    ref=(-m "$gguf_model" --device cuda --rounds 32 --verify-k 16 --graphs --context 1024)
  timeout "${ROUND_TIMEOUT:-150}" "$bin" "${ref[@]}" "$@" --json "$out/$name.json" \
    >"$out/$name.log" 2>&1 || rc=$?
  grep -v '^{' "$out/$name.log" | tail -n 20
  [ "$rc" -eq 0 ] || { echo "$name: exit $rc"; rm -f "$out/$name.json"; }
  return "$rc"
}

report() {  # JSON | --compare BASE_JSON... -- HEAD_JSON...: bench_round's figures as a table
  python3 - "$@" <<'PY'
import json, os, statistics, sys

def figures(path):
    d = json.load(open(path))
    g = d.get("graphs", {})
    dr, v = g.get("draft", {}), g.get("verify_ms", {})
    host = dr.get("round_host_work_outside_waits_ms")
    return {"decode": g.get("decode_step_ms"), "verify 16": v.get("16"), "verify 32": v.get("32"),
            "DSpark round": dr.get("round_ms"), "frac": g.get("decode_fraction_of_copy_bandwidth"),
            "copy": d.get("copy_bandwidth_gbs"), "eager": d.get("decode_step_ms"),
            "host": None if host is None else f"{host * 1e3:.0f} us"}

ms = lambda x: "-" if x is None else f"{x:.3f} ms"
a = sys.argv[1:]
if a[0] != "--compare":
    f = figures(a[0])
    dec, frac = f["decode"], f["frac"]
    print(f"{'graphed decode step':20} {ms(dec):>10}   " +
          ("" if frac is None else f"{100 * frac:.1f}% of copy ({f['copy']:,.0f} GB/s)"))
    for k in ("verify 16", "verify 32", "DSpark round"):
        r = "" if f[k] is None or not dec else f"{f[k] / dec:.3f}x decode"
        print(f"{k:20} {ms(f[k]):>10}   {r}")
    print(f"{'host work per round':20} {f['host'] or '-':>10}   (outside the waits)")
    print(f"{'eager decode step':20} {ms(f['eager']):>10}   (reference)")
    sys.exit(0)
cut = a.index("--")
runs = {"base": [figures(p) for p in a[1:cut] if os.path.exists(p)],
        "head": [figures(p) for p in a[cut + 1:] if os.path.exists(p)]}
print(f"graphed, medians of {len(runs['base'])} base / {len(runs['head'])} head runs")
print(f"{'':14} {'base':>10} {'head':>10} {'head/base':>10}")
for k in ("decode", "verify 16", "DSpark round"):
    m = {}
    for side, fs in runs.items():
        xs = [f[k] for f in fs if f[k] is not None]
        m[side] = statistics.median(xs) if xs else None
    diff = "-" if None in m.values() else f"{100 * (m['head'] / m['base'] - 1):+.2f}%"
    print(f"{k:14} {ms(m['base']):>10} {ms(m['head']):>10} {diff:>10}")
PY
}

cmd="${1:-help}"
[ $# -gt 0 ] && shift
case "$cmd" in
  fetch-debs) fetch_debs; exit $? ;;
  configure | test | bench | compare | ab | all) ;;
  help | -h | --help) usage; exit 0 ;;
  *) usage; exit 2 ;;
esac
if [ "$cmd" = compare ]; then
  base="${1:-}"
  if [[ "$base" == *.tar.gz ]] && [ -f "$base" ]; then
    rm -rf /tmp/dspark-base
    if ! mkdir -p /tmp/dspark-base || ! tar -xzf "$base" -C /tmp/dspark-base; then
      echo "compare: cannot unpack $base"
      exit 2
    fi
    base=/tmp/dspark-base
  fi
  if [ -z "$base" ] || [ ! -f "$base/CMakeLists.txt" ]; then
    echo "compare: BASE must be a source tree or a .tar.gz of one (got '$base'; scripts/gpu.sh help)"
    exit 2
  fi
  base="$(cd "$base" && pwd)"
  shift
  pairs=2
  if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then pairs=$1; shift; fi
  [ "$pairs" -ge 1 ] || { echo "compare: N must be at least 1"; exit 2; }
fi

if [ "$cmd" = ab ]; then
  patch_file="${1:-}"
  if [ -z "$patch_file" ] || [ ! -f "$patch_file" ]; then
    echo "ab: PATCH must be a file that git apply takes (got '$patch_file'; scripts/gpu.sh help)"
    exit 2
  fi
  patch_file="$(cd "$(dirname "$patch_file")" && pwd)/$(basename "$patch_file")"
  shift
  git apply --check "$patch_file" || { echo "ab: $patch_file does not apply to this tree"; exit 2; }
  pairs=3
  if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then pairs=$1; shift; fi
  [ "$pairs" -ge 1 ] || { echo "ab: N must be at least 1"; exit 2; }
fi

out="${OUT:-$repo/gpu-logs}"
mkdir -p "$out"
trap pack_out EXIT
{
  echo "== $cmd, $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null) (+ working tree)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version 2>&1 | tail -n 1
  g++ --version | head -n 1
} | tee "$out/environment.txt"

case "$cmd" in
  configure) [ $# -gt 0 ] && build=$1; configure . "$build" configure ;;
  test) run_tests "$@" ;;
  bench | all)
    status=0
    [ "$cmd" = all ] && { run_tests || status=$?; }
    build_targets . "$build" bench dspark bench_round bench_attention bench_linear || exit $?
    random_checkpoints || exit $?
    round "$build/bin/bench_round" round "$@" || exit $?
    echo
    report "$out/round.json"
    exit "$status"
    ;;
  compare)
    build_targets "$base" "$base/build-gpu" base bench_round || exit $?
    build_targets . "$build" head bench_round || exit $?
    random_checkpoints || exit $?
    base_json=() head_json=()
    for i in $(seq 1 "$pairs"); do
      round "$base/build-gpu/bin/bench_round" "round-base-$i" "$@"
      base_json+=("$out/round-base-$i.json")
      round "$build/bin/bench_round" "round-head-$i" "$@"
      head_json+=("$out/round-head-$i.json")
    done
    echo
    echo "base $base, head $repo (ROUND_ARGS: ${*:-none})"
    report --compare "${base_json[@]}" -- "${head_json[@]}"
    ;;
  ab)
    # The test suite's objects are built with the base, so that after the patch only what it
    # touches is compiled again (and the suite relinked) for AB_TEST.
    targets=(bench_round)
    [ -n "${AB_TEST:-}" ] && targets+=(dspark_cuda_tests)
    build_targets . "$build" ab-base "${targets[@]}" || exit $?
    bins=/tmp/dspark-ab
    mkdir -p "$bins" && cp "$build/bin/bench_round" "$bins/bench_round-base" || exit 2
    git apply "$patch_file" || { echo "ab: git apply $patch_file failed"; exit 2; }
    echo "applied $patch_file:"
    git diff --stat | tail -n 1
    build_targets . "$build" ab-head bench_round || exit $?
    cp "$build/bin/bench_round" "$bins/bench_round-head" || exit 2
    random_checkpoints || exit $?
    base_json=() head_json=()
    for i in $(seq 1 "$pairs"); do
      order=(base head)
      [ $((i % 2)) -eq 0 ] && order=(head base)
      for side in "${order[@]}"; do
        round "$bins/bench_round-$side" "round-$side-$i" "$@"
        if [ "$side" = base ]; then base_json+=("$out/round-base-$i.json"); else head_json+=("$out/round-head-$i.json"); fi
      done
    done
    echo
    echo "base: this tree; head: with $(basename "$patch_file") (ROUND_ARGS: ${*:-none})"
    report --compare "${base_json[@]}" -- "${head_json[@]}"
    [ -z "${AB_TEST:-}" ] || run_tests
    ;;
esac
