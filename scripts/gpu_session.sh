#!/usr/bin/env bash
# One batched GPU-machine session (device time is scarce): build everything, run `ctest -L cuda`,
# synthesize random-weight checkpoints of real shapes, and measure decode speed against the copy
# bandwidth measured in the same run. Logs and JSON go under $OUT.
#   bash scripts/gpu_session.sh [all|tests|perf]    (default all)
# Needs the Debian packages in .carry/debs (bash scripts/gpu_check.sh --fetch-debs; carry `.carry`).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
what="${1:-all}"
out="${OUT:-$repo/gpu-session-logs}"
mkdir -p "$out"
build=build-gpu
export JOBS="${JOBS:-16}" DSPARK_BUILD_BENCH=ON EXTRA_TARGETS="dspark bench_spec ${EXTRA_TARGETS:-}"
if [ "$what" = perf ]; then
  export DSPARK_CONFIGURE_ONLY=
  CTEST_ARGS="-R NONE_AT_ALL" bash scripts/gpu_check.sh "$build" || true
else
  bash scripts/gpu_check.sh "$build"
  echo "gpu_check exit $?"
fi
[ "$what" = tests ] && exit 0

lib="$repo/$build/deps-root/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
bin="$repo/$build/bin"
models=/tmp/dspark-models
mkdir -p "$models/tok"
python3 -c "import lzma,sys; open('$models/tok/tokenizer.json','wb').write(lzma.open('tests/data/tokenizers/qwen3/tokenizer.json.xz').read())"
synth() {  # shape dir
  [ -f "$2/config.json" ] || python3 tools/synth/make_random_checkpoint.py --shape "$1" --out "$2" \
    --tokenizer "$models/tok" 2>&1 | tail -n 2
}
start=$(date +%s)
synth qwen3-8b "$models/qwen3-8b"
synth qwen3-0.6b "$models/qwen3-0.6b"
echo "synth: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"

run() {  # name cmd...
  local name=$1
  shift
  echo "== $name: $*"
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 12 "$out/$name.log"
  echo "(exit $rc)"
}
run generate_8b "$bin/dspark" generate -m "$models/qwen3-8b" -p "Tell me about the sea." -n 256 \
  --device cuda --json
run bench_8b_ngram "$bin/bench_spec" -m "$models/qwen3-8b" --device cuda --draft ngram --gamma 4 \
  -n 128 --n-prompts 4 --json "$out/bench_8b_ngram.json"
run bench_8b_draft "$bin/bench_spec" -m "$models/qwen3-8b" --device cuda \
  --draft "model:$models/qwen3-0.6b" --gamma 4 -n 128 --n-prompts 4 --json "$out/bench_8b_draft.json"
