#!/usr/bin/env bash
# Queue item 0b of docs/perf-notes.md (written after session 16's device time; not yet run): session
# 16's two defaults each alone and together against the previous path, in one call on one machine,
# after `ctest -L cuda` with both on (the plain launch after cuBLASLt never ran under ctest), then
# batch 4 (the K split also takes 4-row decode steps' o and down projections).
# Copy to .carry/ and run `bash .carry/<name>.sh` with carry [".carry"]; about 560 s cold.
cd "$(dirname "$0")/.."
TAIL=12 SKIP_LINEAR=1 VERIFY=16,32 ROUND_TIMEOUT=110 \
  ROUNDS="fp8_vocab32k_lnorm0_pdllt fp8_vocab32k_lnorm2_pdllt fp8_vocab32k_lnorm0 fp8_vocab32k" \
  ROUND_ARGS="--draft /tmp/dspark-models/qwen3-8b-dspark-b16 --gamma 16 --graphs --graphs-only" \
  OUT="$OUT/r" bash scripts/gpu_small_m.sh 2>&1 | grep -vE "^\|-" |
  grep -E "tests passed|FAILED|Failed|==|exit"
for f in "$OUT"/r/round_*.log; do
  echo "== $f"
  grep -E "decode step \(|verify 1|verify 3|full round \(|host work" "$f" | cut -c1-160
done
CTEST_ARGS="-R CudaLinearNorm" TAIL=4 SKIP_LINEAR=1 VERIFY=16 GRID=1 CONTEXT=1024 BATCH=4 \
  ROUND_TIMEOUT=120 ROUNDS="fp8_vocab32k_lnorm0 fp8_vocab32k" \
  ROUND_ARGS="--draft /tmp/dspark-models/qwen3-8b-dspark-b16 --gamma 16 --graphs --graphs-only" \
  OUT="$OUT/b4" bash scripts/gpu_small_m.sh 2>&1 | grep -E "==|exit"
for f in "$OUT"/b4/round_*.log; do
  echo "== $f"
  grep -E "decode step \(|verify 1|full round \(" "$f" | cut -c1-160
done
cd "$OUT" && tar czf all.tar.gz r b4 --remove-files
