#!/usr/bin/env bash
# The whole drafter training run on the GPU machine, one command, every step time-boxed:
#
#   build (CUDA, only the dspark target) -> prompts (committed tools/train/data, or a larger set
#   generated here with make_prompts.py --extend) -> dspark regen, once per REGEN_SAMPLES entry
#   (the target's responses, cuda; tokens only by default) -> train.py (PyTorch, cuda; computes the
#   target's taps / final hidden states with its own forward of the target, target_forward.py) ->
#   export (DeepSpec layout) -> dspark calibrate -> held-out evaluation (greedy, gamma 7): plain,
#   DSpark, DSpark without thresholds, Markov head off (plain DFlash), prompt lookup -> metrics.json
#
#   bash tools/train/pipeline.sh
#   # large data, split over two device calls (10-minute limit per call):
#   STAGES=regen,train TRAIN_PROMPTS_N=30000 REGEN_SAMPLES="0:0,0.8:1" REGEN_SECONDS=200 \
#     TRAIN_MINUTES=4 OUT=... WORK=/tmp/dspark-train bash tools/train/pipeline.sh
#   # optionally more training from where that call stopped (same WORK on the warm machine; a
#   # fresh one needs STAGES=regen,train again), then calibration and evaluation:
#   STAGES=train INIT_DRAFTER=.../drafter TRAIN_MINUTES=8 SKIP_BUILD=1 OUT=... WORK=... \
#     bash tools/train/pipeline.sh
#   STAGES=calibrate,eval SKIP_BUILD=1 OUT=... WORK=/tmp/dspark-train bash tools/train/pipeline.sh
#
# Everything worth keeping lands under $OUT (default: ./train-out): drafter/ (config.json,
# model.safetensors, dspark_thresholds.json, train_metrics.json), logs/*.log, eval/*/meta.json +
# responses.jsonl, regen_meta_*.json, steps.json (per-step status and seconds) and metrics.json.
# The regen shards and the target's weights stay in $WORK (default: /tmp/dspark-train), outside
# $OUT.
#
# Environment (defaults in brackets):
#   MODEL          target [.carry/model/SmolLM2-135M-Instruct.Q4_1.gguf, else models/...]
#   CHAT_TEMPLATE  jinja file [read from the GGUF's tokenizer.chat_template; a model dir: its own]
#   DEVICE [cuda]  BUILD [build-train-gpu]  JOBS [16]  SKIP_BUILD [unset: build]
#   DSPARK         a dspark binary to use instead of building
#   TAPS           target layers [5 spread over the depth: 1 .. L-3]
#   HIDDEN [computed]: computed = regen stores tokens only (~5 bytes/token) plus the target's
#                  weights (--all-target-weights), train.py runs the target to get the taps and
#                  final hidden states of each batch; stored = regen stores them (~7 KB/token for
#                  SmolLM2: 1 M tokens ~ 7 GB), the pipeline of 2026-11-29
#   TRAIN_PROMPTS_N [0]: 0 = the committed tools/train/data/train.jsonl (6000 prompts); N > 6000 =
#                  make_prompts.py --extend N here ($WORK/prompts/train_large.jsonl: the 6000,
#                  then more stdlib docstrings x templates, stdlib code, language-reference texts,
#                  templated questions, open-ended prose; never a held-out source item)
#   PROSE_FRACTION [make_prompts.py's 0.22]: share of the extension taken from the prose pool
#   BROAD_FRACTION [0.3]: share of the extension taken from the broad chat categories and Debian
#                  package descriptions (broad_sources.py; 0 gives the set of runs 3 and 4)
#   SELF_INSTRUCT_N [0]: > 0 = self_instruct.py first: the target writes N questions in the chat
#                  categories (sampled, SELF_INSTRUCT_SEED [20261204]) and answers
#                  SELF_INSTRUCT_FOLLOWUPS [N/4] of them, each with a follow-up turn; the questions
#                  and conversations are spread evenly through the training prompts
#                  (T_SELF_INSTRUCT [300] s)
#   SEED [0]: train.py --seed. The prompt files, seeds and git commit of a run go to
#                  $OUT/data_manifest.json (data_manifest.py). The training prompts are checked
#                  against the held-out evaluation set first (tools/eval/check_overlap.py; and
#                  HumanEval when .carry/humaneval.jsonl is there): an overlap stops the run
#   REGEN_SAMPLES [0:0]: comma list of TEMPERATURE:SEED, one regen run each into its own shard
#                  directory, all trained on (0 = greedy; e.g. "0:0,0.8:1,0.8:2"). With E entries,
#                  entry i starts at prompt i*N/E (wrapping), so a time-limited run spreads its
#                  responses over as many distinct prompts as it can. The held-out sequences of
#                  train.py come from the first entry (keep it greedy, like the evaluation)
#   REGEN_SECONDS [90]: time budget of the whole regen stage, shared by the entries (each gets
#                  what is left / entries left)  REGEN_BATCH [256]  REGEN_MAX_TOKENS [256]
#   REGEN_LIMIT [0 = all]: prompts per entry
#   TRAIN_MINUTES [4.5]  TRAIN_ARGS (extra train.py flags, e.g. "--layers 1 --markov-rank 64")
#   INIT_DRAFTER   an exported drafter directory (e.g. $OUT/drafter of an earlier call): train.py
#                  --init DIR continues from its weights (same drafter flags, taps and gamma; fresh
#                  optimizer and schedule over TRAIN_MINUTES; its held-out prompts stay held out).
#                  $OUT/drafter itself is first moved to $OUT/drafter_init (the train stage
#                  rewrites $OUT/drafter)
#   EVAL_SIM [1]:  after the evaluations, train.py --eval-only measures the drafter's simulated
#                  greedy tau on the plain run's responses to the held-out prompts, by prompt
#                  source (needs $WORK/regen_0/target_weights.safetensors, HIDDEN=computed);
#                  0: skip
#   EVAL_MAX_TOKENS [256]  EVAL_LIMIT [0 = all 128]  CALIB_LIMIT [0 = all 256]  GAMMA [7]
#   T_BUILD [240] T_REGEN [per entry: its budget + 80] T_TRAIN [TRAIN_MINUTES*60+90] T_CALIB [90]
#   T_EVAL [90]: timeouts (s)
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
REGEN_SAMPLES="${REGEN_SAMPLES:-0:0}"
HIDDEN="${HIDDEN:-computed}"
TRAIN_PROMPTS_N="${TRAIN_PROMPTS_N:-0}"
TRAIN_MINUTES="${TRAIN_MINUTES:-4.5}"
EVAL_MAX_TOKENS="${EVAL_MAX_TOKENS:-256}"
EVAL_LIMIT="${EVAL_LIMIT:-0}"
CALIB_LIMIT="${CALIB_LIMIT:-0}"
T_BUILD="${T_BUILD:-240}"
T_REGEN="${T_REGEN:-}"
T_TRAIN="${T_TRAIN:-$(python3 -c "print(int(${TRAIN_MINUTES} * 60 + 90))")}"
T_CALIB="${T_CALIB:-90}"
T_EVAL="${T_EVAL:-90}"
mkdir -p "$OUT/logs" "$OUT/eval" "$WORK"
data="$repo/tools/train/data"
case "$HIDDEN" in computed | stored) ;; *) echo "HIDDEN must be computed or stored"; exit 2 ;; esac

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
deps_env() {  # the environment scripts/gpu.sh sets when it unpacked the Debian packages
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
  OUT="$OUT/logs/build" bash scripts/gpu.sh configure "$BUILD" || return $?
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

# ---- 3. regen: one run per REGEN_SAMPLES entry --------------------------------------------------
if stage regen; then
rm -rf "$WORK"/regen "$WORK"/regen_* "$WORK/prompts"
mkdir -p "$WORK/prompts"
train_prompts="$data/train.jsonl"
if [ "$TRAIN_PROMPTS_N" -gt 0 ]; then
  step prompts_large 300 python3 tools/train/make_prompts.py --out "$data" \
    --extend "$TRAIN_PROMPTS_N" --extend-out "$WORK/prompts/train_large.jsonl" \
    ${PROSE_FRACTION:+--prose-fraction "$PROSE_FRACTION"} \
    --broad-fraction "${BROAD_FRACTION:-0.3}" || exit 4
  cp "$WORK/prompts/train_large_info.json" "$OUT/" || true
  train_prompts="$WORK/prompts/train_large.jsonl"
fi
SELF_INSTRUCT_N="${SELF_INSTRUCT_N:-0}"
if [ "$SELF_INSTRUCT_N" -gt 0 ]; then
  step self_instruct "${T_SELF_INSTRUCT:-300}" python3 tools/train/self_instruct.py \
    --dspark "$DSPARK" --model "$MODEL" --out "$WORK/self_instruct" --device "$DEVICE" \
    --questions "$SELF_INSTRUCT_N" --followups "${SELF_INSTRUCT_FOLLOWUPS:-$((SELF_INSTRUCT_N / 4))}" \
    --seed "${SELF_INSTRUCT_SEED:-20261204}" --batch "$REGEN_BATCH" \
    ${chat_args[2]:+--chat-template "${chat_args[2]}"} || exit 4
  cp "$WORK/self_instruct/self_instruct_info.json" "$OUT/" || true
  # Spread evenly through the list, not appended: a time-limited regen stops partway down the
  # list, and appended self-instruct prompts would never be answered.
  python3 - "$train_prompts" "$WORK/self_instruct/self_instruct.jsonl" \
    "$WORK/prompts/train_all.jsonl" <<'PY' || exit 4
import sys
base = open(sys.argv[1], encoding="utf-8").readlines()
extra = open(sys.argv[2], encoding="utf-8").readlines()
out, j = [], 0
for i, line in enumerate(base):
    out.append(line)
    while j < len(extra) and (j + 1) * len(base) <= (i + 1) * len(extra):
        out.append(extra[j])
        j += 1
out += extra[j:]
open(sys.argv[3], "w", encoding="utf-8").writelines(out)
PY
  train_prompts="$WORK/prompts/train_all.jsonl"
fi
# No training prompt may overlap the held-out evaluation set (and HumanEval, when carried here).
he_args=()
[ -f "$repo/.carry/humaneval.jsonl" ] && he_args=(--humaneval "$repo/.carry/humaneval.jsonl")
step check_overlap 300 python3 tools/eval/check_overlap.py --train "$train_prompts" \
  "${he_args[@]}" || exit 4
python3 tools/train/data_manifest.py --out "$OUT/data_manifest.json" "$train_prompts" \
  "$data/test.jsonl" "$data/calib.jsonl" --seed "train=${SEED:-0}" --seed "prompts=20260529" \
  --seed "regen_samples=$REGEN_SAMPLES" --seed "self_instruct=${SELF_INSTRUCT_SEED:-20261204}" \
  --info "$OUT/train_large_info.json" --info "$OUT/self_instruct_info.json" || true
IFS=',' read -r -a samples <<<"$REGEN_SAMPLES"
n_samples=${#samples[@]}
regen_start=$(date +%s)
: >"$WORK/regen_dirs.txt"
for i in "${!samples[@]}"; do
  temp=${samples[$i]%%:*}
  seed=${samples[$i]#*:}
  [ "$seed" = "${samples[$i]}" ] && seed=$i
  # Entry i starts at prompt i*N/E of the list (wrapping).
  prompts="$WORK/prompts/entry_$i.jsonl"
  python3 - "$train_prompts" "$prompts" "$i" "$n_samples" <<'PY' || exit 4
import sys
src, dst, i, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = open(src, encoding="utf-8").readlines()
k = i * len(lines) // n
open(dst, "w", encoding="utf-8").writelines(lines[k:] + lines[:k])
PY
  left=$((REGEN_SECONDS - ($(date +%s) - regen_start)))
  budget=$((left / (n_samples - i)))
  [ "$budget" -ge 5 ] || budget=5
  if [ "$HIDDEN" = stored ]; then
    hidden_args=(--taps "$TAPS")
  else
    hidden_args=(--taps none)
    [ "$i" -eq 0 ] && hidden_args+=(--all-target-weights)
  fi
  dir="$WORK/regen_$i"
  step "regen_$i" "${T_REGEN:-$((budget + 80))}" "$DSPARK" regen -m "$MODEL" --prompts "$prompts" \
    --out "$dir" --device "$DEVICE" --batch "$REGEN_BATCH" --max-tokens "$REGEN_MAX_TOKENS" \
    --limit "$REGEN_LIMIT" --max-seconds "$budget" --temperature "$temp" --seed "$seed" \
    "${hidden_args[@]}" "${chat_args[@]}" || exit 5
  cp "$dir/meta.json" "$OUT/regen_meta_$i.json"
  echo "$dir" >>"$WORK/regen_dirs.txt"
done
fi

# ---- 4. train + export ----------------------------------------------------------------------------
if stage train; then
init_args=()
if [ -n "${INIT_DRAFTER:-}" ]; then
  [ -f "$INIT_DRAFTER/config.json" ] || { echo "INIT_DRAFTER=$INIT_DRAFTER: no config.json"; exit 6; }
  if [ "$(realpath "$INIT_DRAFTER")" = "$(realpath -m "$OUT/drafter")" ]; then
    rm -rf "$OUT/drafter_init"
    mv "$OUT/drafter" "$OUT/drafter_init"
    INIT_DRAFTER="$OUT/drafter_init"
  fi
  init_args=(--init "$INIT_DRAFTER")
fi
rm -rf "$OUT/drafter"
[ -s "$WORK/regen_dirs.txt" ] || { echo "no regen output in $WORK (run the regen stage)"; exit 6; }
mapfile -t regen_dirs <"$WORK/regen_dirs.txt"
# The first regen entry's prompt file (ids and sources): held-out tau by prompt source.
prompts_args=()
[ -f "$WORK/prompts/entry_0.jsonl" ] && prompts_args=(--prompts-file "$WORK/prompts/entry_0.jsonl")
# shellcheck disable=SC2086
step train "$T_TRAIN" python3 tools/train/train.py --data "${regen_dirs[@]}" --out "$OUT/drafter" \
  --device "$DEVICE" --minutes "$TRAIN_MINUTES" --gamma "$GAMMA" --taps "$TAPS" --seed "${SEED:-0}" \
  ${init_args[@]+"${init_args[@]}"} ${prompts_args[@]+"${prompts_args[@]}"} ${TRAIN_ARGS:-} ||
  exit 6
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
# The simulated tau of the drafter on the same held-out responses (plain run), by prompt source,
# next to the engine's (eval_summary.py --prompts).
tw="$WORK/regen_0/target_weights.safetensors"
if [ "${EVAL_SIM:-1}" != 0 ] && [ "$HIDDEN" = computed ] && [ -f "$tw" ] &&
  [ -f "$OUT/eval/plain/meta.json" ]; then
  step eval_sim "$T_EVAL" python3 tools/train/train.py --eval-only --init "$OUT/drafter" \
    --data "$OUT/eval/plain" --target-weights "$tw" --device "$DEVICE" \
    --prompts-file "$data/test.jsonl" --out "$OUT/eval_sim" || true
fi

python3 tools/train/eval_summary.py --eval "$OUT/eval" --drafter "$OUT/drafter" \
  --prompts "$data/test.jsonl" --sim "$OUT/eval_sim/eval_metrics.json" --steps "$steps_file" \
  --out "$OUT/metrics.json" |
  tee "$OUT/logs/summary.log"
