#!/usr/bin/env bash
# Queued after session 13 (its call 4 was refused: no machine lent). The stream-K kernel
# (kernels/gemv_streamk.cu): its tests and the linear tests with it on, then its own tests with K
# blocks of 128 and 256 forced (DSPARK_CUDA_GEMV_STREAMK_BK), bench_linear at 1-33 rows (columns
# "stream-K" and "stream-K K256"), the graphed round with it. Run from the repository root on the
# GPU machine: bash docs/experiments/2026-12-01-streamk-call4.sh (carry .carry, with the debs of
# scripts/gpu_check.sh --fetch-debs); logs under $OUT.
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
export DSPARK_CUDA_GEMV_STREAMK=1
shapes=6144x4096,4096x4096,24576x4096,4096x12288
CTEST_ARGS="-R CudaGemvStreamK|CudaMatmul|CudaGemvRows" VERIFY=16,32 TAIL=20 SKIP_ROUND=1 \
  LINEAR_ARGS="--shapes $shapes --m 1,4,8,17,33 --iters 100" bash scripts/gpu_small_m.sh
export LD_LIBRARY_PATH="$PWD/build-gpu/deps-root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
for bk in 128 256; do
  DSPARK_CUDA_GEMV_STREAMK_BK=$bk timeout 60 build-gpu/bin/dspark_cuda_tests \
    --gtest_filter='CudaGemvStreamK.*' >"$OUT/x_tests_bk$bk.log" 2>&1
  echo "== tests, BK $bk forced: exit $?"; grep -E "PASSED|FAILED" "$OUT/x_tests_bk$bk.log" | head -5
done
python3 -c "
import json,sys
for r in json.load(open(sys.argv[1]))['results']:
    print(r['n'],r['k'],r['m'],'cublas %.1f'%(r['cublas_ms']*1e3),'streamk %.1f (%.0f%%)'%(r['streamk_ms']*1e3,100*r['streamk_fraction_of_copy']))" "$OUT/linear.json"
CTEST_ARGS="-R CudaGemvStreamK" VERIFY=16,32 TAIL=20 SKIP_LINEAR=1 ROUNDS="fp8_vocab32k_streamk" ROUND_TIMEOUT=150 \
  ROUND_ARGS="--draft /tmp/dspark-models/qwen3-8b-dspark-b16 --gamma 16 --graphs --graphs-only" \
  OUT="$OUT/r" bash scripts/gpu_small_m.sh 2>&1 | grep -vE "^\|-" | grep -E "decode step|verify|round|==|exit"
cd "$OUT" && n=$(find . -type f | wc -l) && [ "$n" -gt 8 ] && tar czf all.tar.gz --remove-files $(ls | grep -v '^all.tar.gz$') && echo "packed $n files"
ls "$OUT"
