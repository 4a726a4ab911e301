#!/usr/bin/env bash
# A short follow-up session: re-run selected CUDA tests and compare linear paths (cuBLASLt vs the
# opt-in small-M kernel) on the 8B shape: decode / verify cost and greedy agreement of
# speculative vs plain decoding. Logs under $OUT.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
export JOBS=16 DSPARK_BUILD_BENCH=ON EXTRA_TARGETS="dspark bench_spec bench_round"
CTEST_ARGS="-R CudaSpeculative|CudaGemv|CudaMatmul" bash scripts/gpu_check.sh build-gpu
echo "tests done ($(( $(date +%s) - t0 )) s)"
lib="$repo/build-gpu/deps-root/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
bin="$repo/build-gpu/bin"
m=/tmp/dspark-models
mkdir -p "$m/tok"
python3 -c "import lzma; open('$m/tok/tokenizer.json','wb').write(lzma.open('tests/data/tokenizers/qwen3/tokenizer.json.xz').read())"
for s in qwen3-8b qwen3-0.6b; do
  [ -f "$m/$s/config.json" ] || timeout 120 python3 tools/synth/make_random_checkpoint.py --shape "$s" --out "$m/$s" --tokenizer "$m/tok" | tail -n 1
done
run 60 round_cublas "$bin/bench_round" -m "$m/qwen3-8b" --device cuda --context 1024 --rounds 32 --verify-k 1,4,7,16,32
run 60 round_gemv env DSPARK_CUDA_GEMV=1 "$bin/bench_round" -m "$m/qwen3-8b" --device cuda --context 1024 --rounds 32 --verify-k 1,4,7
run 60 spec_cublas "$bin/bench_spec" -m "$m/qwen3-8b" --device cuda --draft "model:$m/qwen3-0.6b" --gamma 4 -n 96 --n-prompts 4
run 60 spec_gemv env DSPARK_CUDA_GEMV=1 "$bin/bench_spec" -m "$m/qwen3-8b" --device cuda --draft "model:$m/qwen3-0.6b" --gamma 4 -n 96 --n-prompts 4
run 40 generate_cublas "$bin/dspark" generate -m "$m/qwen3-8b" -p "Tell me about the sea." -n 256 --temperature 0 --device cuda --json
grep -o '"tok_per_s":[0-9.]*' "$out/generate_cublas.log"
echo "done ($(( $(date +%s) - t0 )) s)"
