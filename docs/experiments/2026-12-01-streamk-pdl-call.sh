#!/usr/bin/env bash
# Queued after session 14 (its call 4 ran out of device time before the rounds printed): is the
# stream-K kernel's loss in the graphed verify its programmatic launch (its CTAs resident, and
# streaming weights, while the kernel before it still runs)? The graphed round with the kernel
# launched plainly (DSPARK_CUDA_GEMV_STREAMK_PDL=0), then as a programmatic dependent, then
# without it. Run from the repository root on the GPU machine (carry .carry, with the debs of
# scripts/gpu_check.sh --fetch-debs): bash docs/experiments/2026-12-01-streamk-pdl-call.sh; about
# 420 s on a fresh machine; logs under $OUT.
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
CTEST_ARGS="-R CudaGemvStreamK" TAIL=12 SKIP_LINEAR=1 VERIFY=16,32 \
  ROUNDS="fp8_vocab32k_streamk_sknopdl fp8_vocab32k_streamk fp8_vocab32k_nostreamk" ROUND_TIMEOUT=110 \
  ROUND_ARGS="--draft /tmp/dspark-models/qwen3-8b-dspark-b16 --gamma 16 --graphs --graphs-only" \
  bash scripts/gpu_small_m.sh 2>&1 | grep -vE "^\|-" |
  grep -E "tests passed|FAILED|Failed|decode step \(|verify 16|verify 32|round \(graphs|==|exit"
ls "$OUT"
