#!/usr/bin/env bash
# Greedy speculative == plain greedy at several batch sizes and with several draft sources
# (issue 37): `dspark eval` of the first N held-out chat items at each batch size with each source,
# then one table (tools/eval/equality_table.py) of
#   - speculative outputs equal to plain outputs of the same batch (eval's "identical");
#   - plain outputs at batch B equal to those at batch 1 (eval's per-turn output_hash), i.e. a
#     row's tokens do not depend on the other rows of its forward.
#
#   bash tools/eval/greedy_equality.sh        # the bundled SmolLM2 GGUF on the CPU
#
# Environment (defaults in brackets): DSPARK [build/bin/dspark], MODEL [the bundled GGUF],
# DRAFTER [the bundled DSpark drafter], DEVICE [cpu], PROMPTS [tools/eval/data/chat_eval.jsonl],
# LIMIT [128 items], MAX_TOKENS [128], BATCHES ["1 8 32"], SOURCES ["dspark ngram model"]: model
# is a draft model cut from MODEL (its first DRAFT_LAYERS [24] blocks,
# tools/eval/make_layer_draft.py; MODEL must be a GGUF file, and the gguf package importable by
# PYTHON [python3]; on SmolLM2 24 of 30 blocks have draft 1 accepted in about a quarter of the
# rounds, so rounds both accept and roll back), OUT [build/equality], EVAL_ARGS [more dspark
# eval flags, e.g. --exact for CUDA's batch-invariant numerics], RAW [0; 1: each item's first
# prompt encoded as it is, without the chat template, for models that have none, such as the
# random-weight files of tools/synth/make_random_gguf.py].
# Outputs: $OUT/<source>-b<batch>.json (dspark eval --json), $OUT/equality.md and equality.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
DSPARK=${DSPARK:-$root/build/bin/dspark}
MODEL=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
DRAFTER=${DRAFTER:-$root/models/SmolLM2-135M-Instruct-DSpark}
DEVICE=${DEVICE:-cpu}
PROMPTS=${PROMPTS:-$root/tools/eval/data/chat_eval.jsonl}
LIMIT=${LIMIT:-128}
MAX_TOKENS=${MAX_TOKENS:-128}
BATCHES=${BATCHES:-1 8 32}
SOURCES=${SOURCES:-dspark ngram model}
DRAFT_LAYERS=${DRAFT_LAYERS:-24}
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$root/build/equality}

[ -x "$DSPARK" ] || { echo "greedy_equality: no dspark at $DSPARK (build it first)" >&2; exit 1; }
[ -e "$MODEL" ] || bash "$root/scripts/fetch_default_model.sh"
mkdir -p "$OUT"
if [ "${RAW:-0}" = 1 ]; then
  "$PYTHON" - "$PROMPTS" "$OUT/prompts-raw.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        if not line.strip():
            continue
        item = json.loads(line)
        prompt = item["turns"][0] if "turns" in item else item["prompt"]
        out.write(json.dumps({"id": item["id"], "category": item.get("category", ""),
                              "prompt": prompt, "raw": True}) + "\n")
PY
  PROMPTS=$OUT/prompts-raw.jsonl
fi

results=()
for source in $SOURCES; do
  case $source in
    dspark)
      args=(--draft "$DRAFTER")
      [ -f "$DRAFTER/draft_vocab.json" ] && args+=(--draft-vocab "$DRAFTER/draft_vocab.json") ;;
    ngram) args=(--draft ngram) ;;
    model)
      draft=$OUT/draft-${DRAFT_LAYERS}layers.gguf
      [ -f "$draft" ] || "$PYTHON" "$root/tools/eval/make_layer_draft.py" "$MODEL" "$draft" \
        --layers "$DRAFT_LAYERS"
      args=(--draft "model:$draft") ;;
    *) echo "greedy_equality: unknown source '$source'" >&2; exit 1 ;;
  esac
  for batch in $BATCHES; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "greedy_equality: $source batch $batch ($(date -u +%H:%M:%S), load $load)"
    # Exit status 1 means an output differed in f32: recorded in the table, not fatal here.
    "$DSPARK" eval -m "$MODEL" "${args[@]}" --draft-policy fixed --device "$DEVICE" \
      -n "$MAX_TOKENS" --limit "$LIMIT" --batch "$batch" -q --prompts "$PROMPTS" ${EVAL_ARGS:-} \
      --json "$OUT/$source-b$batch.json" >"$OUT/$source-b$batch.txt" || true
    results+=("$source:$batch:$OUT/$source-b$batch.json")
  done
done
python3 "$root/tools/eval/equality_table.py" "${results[@]}" --json "$OUT/equality.json" |
  tee "$OUT/equality.md"
