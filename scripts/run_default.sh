#!/usr/bin/env bash
# `make run`: dspark's main job on the bundled default model. Until the default pretrained model
# lands (see docs/), this runs the tiny golden Qwen3 checkpoint from tests/data, and says so.
set -euo pipefail
bin=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
model="$root/tests/data/models/qwen3"
echo "make run: no bundled pretrained model yet; running the tiny random-weight golden checkpoint"
echo "          $model (its text is gibberish by construction: it proves the pipeline, not quality)"
prompt="Once upon a time"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then prompt=$1; shift; fi
exec "$bin" generate -m "$model" -p "$prompt" -n 48 "$@"
