#!/usr/bin/env bash
# GPU session for issue 6's context x batch grid: builds bench_round only (no test suites), writes
# the random Qwen3-8B checkpoint, then one bench_round process per (context, batch) point, each
# with the time left before DEADLINE, its JSON straight under $OUT (the device tool returns at most
# 8 files: at most 6 points plus g.log).
#   bash scripts/gpu_grid.sh             (carry .carry/debs; OUT set by the device tool, else
#                                          gpu-session-logs)
# Environment: POINTS ("CONTEXT BATCH" pairs separated by ';', default the six batch 4 / 16 points
# of 512 / 4096 / 16384), DEADLINE (seconds from the start, default 560), ROUNDS (default 8),
# VERIFY (default 16,32), ARGS (more bench_round flags, e.g. "--draft DIR --gamma 16").
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
log="$out/g.log"
M=/tmp/dspark-models
DSPARK_BUILD_BENCH=ON DSPARK_CONFIGURE_ONLY=1 OUT=/tmp/gpu-grid-cfg bash scripts/gpu_check.sh build-gpu >"$log" 2>&1
ninja -C build-gpu -j "${JOBS:-16}" bench_round >/tmp/gpu-grid-build.log 2>&1 ||
  { tail -30 /tmp/gpu-grid-build.log >>"$log"; exit 1; }
echo "built ($(( $(date +%s) - t0 )) s)" >>"$log"
export LD_LIBRARY_PATH="$PWD/build-gpu/deps-root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
random_checkpoints "$M" qwen3-8b >>"$log"
echo "synth ($(( $(date +%s) - t0 )) s)" >>"$log"
IFS=';' read -r -a points <<<"${POINTS:-512 4;512 16;4096 4;4096 16;16384 4;16384 16}"
for point in "${points[@]}"; do
  read -r c b <<<"$point"
  left=$(( ${DEADLINE:-560} - ($(date +%s) - t0) ))
  [ "$left" -lt 20 ] && { echo "skipped c$c b$b (time)" >>"$log"; continue; }
  echo "== context $c, batch $b (limit $left s, at $(( $(date +%s) - t0 )) s)" >>"$log"
  # shellcheck disable=SC2086
  timeout "$left" build-gpu/bin/bench_round -m "$M/qwen3-8b" --device cuda --rounds "${ROUNDS:-8}" \
    --verify-k "${VERIFY:-16,32}" --graphs --graphs-only --context "$c" --batch "$b" ${ARGS:-} \
    --json "$out/grid_c${c}_b${b}.json" >/tmp/gpu-grid-point.log 2>&1
  echo "exit $?" >>"$log"
  grep -v '^{' /tmp/gpu-grid-point.log | tail -n 10 >>"$log"
done
