#!/usr/bin/env bash
# The drafter training run as device-tool calls on one warm GPU machine (tools/train/TRAINING.md,
# run 3): each call is one step, the state between calls lives in /tmp of that machine, and what
# comes back fits the tool's limits (at most 8 files of at most 16 MiB under $OUT: the drafter's
# model.safetensors in 15 MiB parts plus one archive of the small files).
#
#   bash tools/train/gpu_calls.sh build      # build dspark + bench_spec only (no ctest, no regen)
#   bash tools/train/gpu_calls.sh regen      # build + ctest -L cuda, then the regen stage
#   bash tools/train/gpu_calls.sh train      # train (again: continue from the last drafter)
#   bash tools/train/gpu_calls.sh finish     # calibrate, evaluate, bench_spec new vs bundled
#   bash tools/train/gpu_calls.sh evalset    # dspark eval, new drafter: held-out chat set + HumanEval
#   # here: bash tools/train/gpu_calls.sh unpack /work/.device/N DEST  (rebuilds DEST/drafter)
#
# The target must already be on the machine (MODEL; TRAINING.md: "Getting the GGUF onto the GPU
# machine first"). Environment (defaults in brackets):
#   MODEL [/tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf]   PO [/tmp/po: the pipeline's OUT]
#   WORK [/tmp/dspark-train]   KEEP [/tmp/dspark-keep: the latest drafter, across calls]
#   BUILD [build-gpu]   SKIP_CHECK=1 (regen: build, no ctest)   CTEST_ARGS (regen: for ctest -L cuda)
#   DSPARK (a dspark binary: no build; finish needs $BUILD/bin/bench_spec for its benchmark)
#   TRAIN_PROMPTS_N [70000]   REGEN_SECONDS [300]   TRAIN_MINUTES [7.4]
#   TRAIN_ARGS ["--eval-every 120 --markov-rank 64"]   FRESH=1 (train: from scratch even when
#   KEEP holds a drafter)   INIT (train, when KEEP holds no drafter: start from this exported
#   drafter, e.g. the bundled one)   TRAIN_SCHEDULE (minutes: one cosine learning-rate schedule
#   over several train calls; each call continues it where the last stopped, $KEEP/minutes_done)
#   BENCH_PROMPTS [64]   DEVICE [cuda]   BENCH_BUNDLED [1]: finish also benchmarks the bundled one
#   BENCH_ARGS (finish: more bench_spec flags, e.g. --exact: outputs equal to plain bit for bit)
#   BROAD_FRACTION [0.3]   SELF_INSTRUCT_N [16000] (regen: the pipeline's knobs)
#   HUMANEVAL_PROMPTS [.carry/humaneval.jsonl] (evalset: made here by tools/eval/humaneval_prompts.py;
#   the GPU machine has no PyPI)   EVAL_MAX_TOKENS_SET [256]
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
step="${1:-}"
MODEL="${MODEL:-/tmp/gguf/SmolLM2-135M-Instruct.Q4_1.gguf}"
PO="${PO:-/tmp/po}"
WORK="${WORK:-/tmp/dspark-train}"
KEEP="${KEEP:-/tmp/dspark-keep}"
BUILD="${BUILD:-build-gpu}"
DEVICE="${DEVICE:-cuda}"
OUT="${OUT:-$repo/gpu-calls-out}"
export TRAIN_ARGS="${TRAIN_ARGS:---eval-every 120 --markov-rank 64}"
mkdir -p "$OUT"

pipeline() {  # STAGES, then extra VAR=value settings
  local stages=$1
  shift
  env STAGES="$stages" MODEL="$MODEL" OUT="$PO" WORK="$WORK" BUILD="$BUILD" DEVICE="$DEVICE" \
    ${DSPARK:+DSPARK=$DSPARK} SKIP_BUILD=1 "$@" bash tools/train/pipeline.sh
}

# The drafter dir $1 as $OUT/drafter_part_* (15 MiB pieces of model.safetensors) plus the small
# files and the pipeline's logs / metrics in $OUT/results.tgz.
pack() {
  local d=$1
  split -b 15M -d "$d/model.safetensors" "$OUT/drafter_part_" || return 1
  tar czf "$OUT/results.tgz" -C "$PO" --exclude ./drafter/model.safetensors . || return 1
  ls -la "$OUT"
}

build_tools() {  # dspark + bench_spec in $BUILD; the CUDA tests too unless SKIP_CHECK
  local ctest_args=${CTEST_ARGS:-}
  [ -n "${SKIP_CHECK:-}" ] && ctest_args="-R ^no-test-has-this-name$"
  # shellcheck disable=SC2086
  BUILD="$BUILD" EXTRA_TARGETS="dspark bench_spec" OUT=/tmp/gpu-check \
    bash scripts/gpu.sh test $ctest_args | tail -n 12
  cp /tmp/gpu-check/ctest.log "$OUT/" 2>/dev/null
  [ -x "$BUILD/bin/dspark" ] || { echo "no $BUILD/bin/dspark"; return 3; }
}

case "$step" in
  build)
    SKIP_CHECK=1 build_tools
    ;;
  regen)
    [ -e "$MODEL" ] || { echo "no target at $MODEL (transfer it first)"; exit 2; }
    if [ -z "${DSPARK:-}" ]; then  # build dspark + bench_spec (+ the CUDA tests, run them)
      build_tools || exit 3
    fi
    rm -rf "$PO" "$KEEP"
    pipeline regen TRAIN_PROMPTS_N="${TRAIN_PROMPTS_N:-70000}" REGEN_SAMPLES=0:0 \
      REGEN_SECONDS="${REGEN_SECONDS:-300}" BROAD_FRACTION="${BROAD_FRACTION:-0.3}" \
      SELF_INSTRUCT_N="${SELF_INSTRUCT_N:-16000}" >"$OUT/regen.log" 2>&1
    rc=$?
    grep -v '^\s*$' "$OUT/regen.log" | tail -n 8
    exit "$rc"
    ;;
  train)
    init=()
    if [ -z "${FRESH:-}" ] && [ -f "$KEEP/drafter/config.json" ]; then
      init=(INIT_DRAFTER="$KEEP/drafter")
      echo "continuing from $KEEP/drafter"
    elif [ -n "${INIT:-}" ]; then
      init=(INIT_DRAFTER="$INIT")
      echo "starting from $INIT"
      rm -f "$KEEP/minutes_done"
    fi
    minutes="${TRAIN_MINUTES:-7.4}"
    sched=()
    if [ -n "${TRAIN_SCHEDULE:-}" ]; then
      [ -n "${FRESH:-}" ] && rm -f "$KEEP/minutes_done"
      done_min=$(cat "$KEEP/minutes_done" 2>/dev/null || echo 0)
      sched=(TRAIN_ARGS="$TRAIN_ARGS --schedule-minutes $TRAIN_SCHEDULE --schedule-start $done_min")
      echo "schedule: $done_min of $TRAIN_SCHEDULE minutes done, this call $minutes"
    fi
    pipeline train TRAIN_MINUTES="$minutes" "${init[@]}" "${sched[@]}" >"$OUT/train.log" 2>&1
    rc=$?
    grep -E "eval step|final:|export:|exit" "$OUT/train.log" | tail -n 12
    [ "$rc" -eq 0 ] || exit "$rc"
    [ -f "$PO/drafter/model.safetensors" ] || { echo "no drafter in $PO/drafter"; exit 6; }
    rm -rf "$KEEP/drafter" && mkdir -p "$KEEP" && cp -r "$PO/drafter" "$KEEP/drafter"
    if [ -n "${TRAIN_SCHEDULE:-}" ]; then
      python3 -c "print(${done_min} + ${minutes})" >"$KEEP/minutes_done"
    fi
    pack "$KEEP/drafter"
    ;;
  finish)
    [ -f "$KEEP/drafter/config.json" ] || { echo "no trained drafter in $KEEP"; exit 2; }
    rm -rf "$PO/drafter" && cp -r "$KEEP/drafter" "$PO/drafter"
    pipeline calibrate,eval >"$OUT/eval.log" 2>&1
    tail -n 12 "$PO/logs/summary.log" 2>/dev/null
    cp "$PO/drafter/dspark_thresholds.json" "$KEEP/drafter/" 2>/dev/null
    bench="$repo/$BUILD/bin/bench_spec"
    lib="$repo/$BUILD/deps-root/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
    drafters=("$KEEP/drafter")
    [ "${BENCH_BUNDLED:-1}" = 1 ] && drafters+=(models/SmolLM2-135M-Instruct-DSpark)
    for d in "${drafters[@]}"; do
      name=$([ "$d" = "$KEEP/drafter" ] && echo new || echo bundled)
      [ -x "$bench" ] || break
      # shellcheck disable=SC2086  # BENCH_ARGS: several words
      "$bench" -m "$MODEL" --draft "$d" --gamma 7 --prompts tools/train/data/test.jsonl \
        --n-prompts "${BENCH_PROMPTS:-64}" -n 256 --chat --eos --device "$DEVICE" ${BENCH_ARGS:-} \
        --json "$PO/bench_spec_$name.json" >"$PO/logs/bench_spec_$name.log" 2>&1
      echo "bench_spec $name: exit $?"
      grep -E "^\| |mismatches with plain" "$PO/logs/bench_spec_$name.log" | tail -n 4
    done
    pack "$KEEP/drafter"
    ;;
  evalset)  # the standing evaluation (docs/performance.md) of the latest drafter, greedy, gamma 7
    [ -f "$KEEP/drafter/config.json" ] || { echo "no trained drafter in $KEEP"; exit 2; }
    he="${HUMANEVAL_PROMPTS:-$repo/.carry/humaneval.jsonl}"
    sets="chat"
    [ -f "$he" ] && sets="chat humaneval" || echo "no $he: HumanEval skipped"
    lib="$repo/$BUILD/deps-root/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
    DSPARK="${DSPARK:-$repo/$BUILD/bin/dspark}" MODEL="$MODEL" DRAFTER="$KEEP/drafter" \
      DRAFT_VOCAB=none DEVICE="$DEVICE" MAX_TOKENS="${EVAL_MAX_TOKENS_SET:-256}" SETS="$sets" \
      HUMANEVAL_PROMPTS="$he" PLOT=0 OUT="$PO/evalset" bash tools/eval/run_eval.sh
    rc=$?
    tar czf "$OUT/evalset.tgz" -C "$PO" evalset
    exit "$rc"
    ;;
  unpack)  # here: DIR (the call's files) DEST
    src=${2:?files directory}
    dest=${3:?destination}
    mkdir -p "$dest" && tar xzf "$src/results.tgz" -C "$dest" || exit 1
    cat "$src"/drafter_part_* >"$dest/drafter/model.safetensors" || exit 1
    ls -la "$dest/drafter"
    ;;
  *)
    sed -n 2,20p "$0"
    exit 2
    ;;
esac
