#!/usr/bin/env bash
# One batched GPU-machine session (device time is scarce): build everything, run `ctest -L cuda`,
# synthesize random-weight checkpoints of real shapes, and measure decode / round costs against the
# copy bandwidth measured in the same run. Logs and JSON go under $OUT; every step is time-boxed so
# the whole call ends inside the device tool's limit.
#   bash scripts/gpu_session.sh [all|tests|perf]    (default all)
# Needs the Debian packages in .carry/debs (bash scripts/gpu_check.sh --fetch-debs; carry `.carry`).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
what="${1:-all}"
build=build-gpu
export JOBS="${JOBS:-16}" DSPARK_BUILD_BENCH=ON EXTRA_TARGETS="dspark bench_spec bench_round ${EXTRA_TARGETS:-}"
if [ "$what" = perf ]; then
  CTEST_ARGS="-R NONE_AT_ALL" bash scripts/gpu_check.sh "$build" || true
else
  bash scripts/gpu_check.sh "$build"
  echo "gpu_check exit $? ($(( $(date +%s) - t0 )) s)"
fi
[ "$what" = tests ] && exit 0

lib="$repo/$build/deps-root/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
bin="$repo/$build/bin"
models=/tmp/dspark-models
mkdir -p "$models/tok"
python3 -c "import lzma; open('$models/tok/tokenizer.json','wb').write(lzma.open('tests/data/tokenizers/qwen3/tokenizer.json.xz').read())"
synth() {  # shape dir
  [ -f "$2/config.json" ] || timeout 200 python3 tools/synth/make_random_checkpoint.py \
    --shape "$1" --out "$2" --tokenizer "$models/tok" 2>&1 | tail -n 1
}
synth qwen3-8b "$models/qwen3-8b"
synth qwen3-0.6b "$models/qwen3-0.6b"
synth qwen3-8b-dspark-b16 "$models/qwen3-8b-dspark-b16"
echo "synth done ($(( $(date +%s) - t0 )) s)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$out/gpu.txt"

run 90 round_8b_dspark "$bin/bench_round" -m "$models/qwen3-8b" --device cuda --context 1024 \
  --rounds 32 --verify-k 1,16,32 --draft "$models/qwen3-8b-dspark-b16" --gamma 16 \
  --json "$out/round_8b_dspark.json"
run 60 generate_8b "$bin/dspark" generate -m "$models/qwen3-8b" -p "Tell me about the sea." \
  -n 256 --temperature 0 --device cuda --json
run 90 spec_8b_draftmodel "$bin/bench_spec" -m "$models/qwen3-8b" --device cuda \
  --draft "model:$models/qwen3-0.6b" --gamma 4 -n 128 --n-prompts 4 --json "$out/spec_8b_draftmodel.json"
run 60 spec_8b_ngram "$bin/bench_spec" -m "$models/qwen3-8b" --device cuda --draft ngram \
  --gamma 4 -n 128 --n-prompts 4 --json "$out/spec_8b_ngram.json"
echo "session done ($(( $(date +%s) - t0 )) s)"
