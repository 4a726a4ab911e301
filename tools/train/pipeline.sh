#!/usr/bin/env bash
# The whole drafter training run on the GPU machine, one command, every step time-boxed:
#
#   build (CUDA, only the dspark target) -> prompts (committed tools/train/data) -> dspark regen
#   (target responses + taps, cuda) -> train.py (PyTorch, cuda) -> export (DeepSpec layout) ->
#   dspark calibrate -> held-out evaluation (greedy, gamma 7): plain, DSpark, DSpark without
#   thresholds, Markov head off (plain DFlash), prompt lookup -> metrics.json
#
#   bash tools/train/pipeline.sh
#
# Everything worth keeping lands under $OUT (default: ./train-out): drafter/ (config.json,
# model.safetensors, dspark_thresholds.json, train_metrics.json), logs/*.log, eval/*/meta.json +
# responses.jsonl, steps.json (per-step status and seconds) and metrics.json. The regen shards
# (GBs) stay in $WORK (default: /tmp/dspark-train), outside $OUT.
#
# Environment (defaults in brackets):
#   MODEL          target [.carry/model/SmolLM2-135M-Instruct.Q4_1.gguf, else models/...]
#   CHAT_TEMPLATE  jinja file [read from the GGUF's tokenizer.chat_template; a model dir: its own]
#   DEVICE [cuda]  BUILD [build-train-gpu]  JOBS [16]  SKIP_BUILD [unset: build]
#   DSPARK         a dspark binary to use instead of building
#   TAPS           target layers [5 spread over the depth: 1 .. L-3]
#   REGEN_SECONDS [90]  REGEN_BATCH [256]  REGEN_MAX_TOKENS [256]  REGEN_LIMIT [0 = all]
#   TRAIN_MINUTES [4.5]  TRAIN_ARGS (extra train.py flags, e.g. "--layers 1 --markov-rank 64")
#   EVAL_MAX_TOKENS [256]  EVAL_LIMIT [0 = all 128]  CALIB_LIMIT [0 = all 256]  GAMMA [7]
#   T_BUILD [240] T_REGEN [180] T_TRAIN [TRAIN_MINUTES*60+90] T_CALIB [90] T_EVAL [90]: timeouts (s)
#   STAGES [all]: a comma list of regen,train,calibrate,eval to run part of the pipeline (the
#                 device tool limits one command to 10 minutes: run "regen,train" then
#                 "calibrate,eval" with the same OUT and WORK outside the tool's $OUT)
set -uo pipefail
STAGES="${STAGES:-all}"
stage() { [ "$STAGES" = all ] || [[ ",$STAGES," == *",$1,"* ]]; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
OUT="${OUT:-$repo/train-out}"
WORK="${WORK:-/tmp/dspark-train}"
DEVICE="${DEVICE:-cuda}"
BUILD="${BUILD:-build-train-gpu}"
JOBS="${JOBS:-16}"
GAMMA="${GAMMA:-7}"
REGEN_SECONDS="${REGEN_SECONDS:-90}"
REGEN_BATCH="${REGEN_BATCH:-256}"
REGEN_MAX_TOKENS="${REGEN_MAX_TOKENS:-256}"
REGEN_LIMIT="${REGEN_LIMIT:-0}"
TRAIN_MINUTES="${TRAIN_MINUTES:-4.5}"
EVAL_MAX_TOKENS="${EVAL_MAX_TOKENS:-256}"
EVAL_LIMIT="${EVAL_LIMIT:-0}"
CALIB_LIMIT="${CALIB_LIMIT:-0}"
T_BUILD="${T_BUILD:-240}"
T_REGEN="${T_REGEN:-$((REGEN_SECONDS + 80))}"
T_TRAIN="${T_TRAIN:-$(python3 -c "print(int(${TRAIN_MINUTES} * 60 + 90))")}"
T_CALIB="${T_CALIB:-90}"
T_EVAL="${T_EVAL:-90}"
mkdir -p "$OUT/logs" "$OUT/eval" "$WORK"
data="$repo/tools/train/data"

if [ -z "${MODEL:-}" ]; then
  for m in "$repo"/.carry/model/*.gguf "$repo"/models/SmolLM2-135M-Instruct.Q4_1.gguf; do
    [ -f "$m" ] && { MODEL="$m"; break; }
  done
fi
[ -n "${MODEL:-}" ] && [ -e "$MODEL" ] || { echo "no target model (set MODEL)"; exit 2; }

steps_file="$OUT/steps.json"
{ [ "$STAGES" != all ] && [ -f "$steps_file" ]; } || echo "[]" >"$steps_file"
record() {  # name rc seconds
  python3 - "$steps_file" "$1" "$2" "$3" <<'PY'
import json, sys
f, name, rc, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
steps = json.load(open(f))
steps.append({"step": name, "rc": rc, "seconds": s, "timed_out": rc in (124, 137)})
json.dump(steps, open(f, "w"), indent=1)
PY
}
# step NAME TIMEOUT_S CMD...: runs with a timeout, logs to $OUT/logs/NAME.log, records rc + time.
step() {
  local name="$1" limit="$2"
  shift 2
  local start rc
  start=$(date +%s.%N)
  echo "== $name (timeout ${limit} s): $*" | tee "$OUT/logs/$name.log"
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$OUT/logs/$name.log"
  rc=${PIPESTATUS[0]}
  local secs
  secs=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  echo "== $name: exit $rc after $secs s" | tee -a "$OUT/logs/$name.log"
  record "$name" "$rc" "$secs"
  return "$rc"
}

{
  echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) (+ working tree)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1
  echo "model: $MODEL"
} | tee "$OUT/logs/environment.txt"

# ---- 1. build -----------------------------------------------------------------------------------
deps_env() {  # the environment scripts/gpu_check.sh sets when it unpacked the Debian packages
  local root="$repo/$BUILD/deps-root"
  local lib="$root/usr/lib/x86_64-linux-gnu"
  [ -d "$lib" ] || return 0
  export PKG_CONFIG_PATH="$lib/pkgconfig:$root/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  export CPATH="$root/usr/include${CPATH:+:$CPATH}" LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
}
build() {
  # Configure exactly like the GPU check (dependencies, compiler workarounds), then build only
  # the dspark binary.
  OUT="$OUT/logs/build" DSPARK_CONFIGURE_ONLY=1 bash scripts/gpu_check.sh "$BUILD" || return $?
  deps_env
  ninja -C "$BUILD" -j "$JOBS" dspark
}
if [ -n "${DSPARK:-}" ]; then
  :
elif [ -n "${SKIP_BUILD:-}" ] && [ -x "$BUILD/bin/dspark" ]; then
  DSPARK="$repo/$BUILD/bin/dspark"
else
  export repo BUILD JOBS OUT
  step build "$T_BUILD" bash -c "$(declare -f deps_env build); build" || {
    echo "build failed"
    exit 3
  }
  DSPARK="$repo/$BUILD/bin/dspark"
fi
deps_env  # the loader path for the binary
[ -x "$DSPARK" ] || DSPARK="$(find "$repo/$BUILD" -maxdepth 2 -name dspark -type f -perm -u+x | head -n 1)"
[ -x "$DSPARK" ] || { echo "no dspark binary"; exit 3; }

# ---- 2. prompts, chat template, taps --------------------------------------------------------------
if [ ! -f "$data/train.jsonl" ] || [ ! -f "$data/test.jsonl" ]; then
  step prompts 120 python3 tools/train/make_prompts.py --out "$data" || exit 4
fi
chat_args=(--chat)
if [ -n "${CHAT_TEMPLATE:-}" ]; then
  chat_args+=(--chat-template "$CHAT_TEMPLATE")
elif [ -f "$MODEL" ]; then
  python3 tools/train/gguf_meta.py "$MODEL" tokenizer.chat_template >"$OUT/chat_template.jinja" ||
    exit 4
  chat_args+=(--chat-template "$OUT/chat_template.jinja")
fi
if [ -z "${TAPS:-}" ]; then
  if [ -f "$MODEL" ]; then
    layers=$(python3 tools/train/gguf_meta.py "$MODEL" '*.block_count')
  else
    layers=$(python3 -c "import json; print(json.load(open('$MODEL/config.json'))['num_hidden_layers'])")
  fi
  # 5 taps spread from layer 1 to L-3 (DFlash's default spread; never the last layer); shallow
  # targets (L < 10, the test models) tap 0 .. L-2.
  TAPS=$(python3 -c "
L = $layers
lo, hi = (1, L - 3) if L >= 10 else (0, L - 2)
n = min(5, hi - lo + 1)
print(','.join(str(t) for t in sorted({round(lo + i * (hi - lo) / max(1, n - 1)) for i in range(n)})))")
fi
echo "taps: $TAPS" | tee -a "$OUT/logs/environment.txt"

# ---- 3. regen -------------------------------------------------------------------------------------
if stage regen; then
rm -rf "$WORK/regen"
step regen "$T_REGEN" "$DSPARK" regen -m "$MODEL" --prompts "$data/train.jsonl" --out "$WORK/regen" \
  --device "$DEVICE" --batch "$REGEN_BATCH" --max-tokens "$REGEN_MAX_TOKENS" --taps "$TAPS" \
  --limit "$REGEN_LIMIT" --max-seconds "$REGEN_SECONDS" "${chat_args[@]}" || exit 5
cp "$WORK/regen/meta.json" "$OUT/regen_meta.json"
fi

# ---- 4. train + export ----------------------------------------------------------------------------
if stage train; then
rm -rf "$OUT/drafter"
# shellcheck disable=SC2086
step train "$T_TRAIN" python3 tools/train/train.py --data "$WORK/regen" --out "$OUT/drafter" \
  --device "$DEVICE" --minutes "$TRAIN_MINUTES" --gamma "$GAMMA" ${TRAIN_ARGS:-} || exit 6
fi

# ---- 5. calibrate (held-out calibration prompts, rendered through the chat template) --------------
if stage calibrate; then
step calib_prompts 60 "$DSPARK" regen -m "$MODEL" --prompts "$data/calib.jsonl" --out "$WORK/calib" \
  --device "$DEVICE" --max-tokens 1 --limit "$CALIB_LIMIT" "${chat_args[@]}" || true
if [ -f "$WORK/calib/prompts_rendered.jsonl" ]; then
  step calibrate "$T_CALIB" "$DSPARK" calibrate -m "$MODEL" --draft "$OUT/drafter" \
    --prompts "$WORK/calib/prompts_rendered.jsonl" -n 128 --device "$DEVICE" --json || true
fi
fi

# ---- 6. held-out evaluation -----------------------------------------------------------------------
evaluate() {  # name draft-args...
  local name="$1"
  shift
  step "eval_$name" "$T_EVAL" "$DSPARK" regen -m "$MODEL" --prompts "$data/test.jsonl" \
    --out "$OUT/eval/$name" --device "$DEVICE" --max-tokens "$EVAL_MAX_TOKENS" --batch 128 \
    --limit "$EVAL_LIMIT" "${chat_args[@]}" "$@" || true
}
stage eval || exit 0
evaluate plain --draft none
evaluate dspark --draft "$OUT/drafter" --gamma "$GAMMA"
evaluate dspark_unpruned --draft "$OUT/drafter" --gamma "$GAMMA" --no-thresholds
evaluate dflash --draft "$OUT/drafter" --gamma "$GAMMA" --no-thresholds --no-markov
evaluate ngram --draft ngram --gamma "$GAMMA"

python3 tools/train/eval_summary.py --eval "$OUT/eval" --drafter "$OUT/drafter" \
  --steps "$steps_file" --out "$OUT/metrics.json" | tee "$OUT/logs/summary.log"
