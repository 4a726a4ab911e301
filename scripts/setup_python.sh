#!/usr/bin/env bash
# The Python packages the tests use as references (PyPI): a virtual environment in $1
# (default build/pyenv) with safetensors, numpy, tokenizers, openai (the official client the
# server tests drive dspark serve with) and gguf (llama.cpp's reader and quantizers, the reference
# of dspark quantize's GGUF output) and jsonschema (checks structured output against its schema).
# Skipped when it already has them.
set -euo pipefail
venv="${1:-build/pyenv}"
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "import safetensors, numpy, tokenizers, openai, gguf, jsonschema" 2>/dev/null; then
  exit 0
fi
python3 -m venv "$venv" || { echo "setup: python3 -m venv failed (install python3-venv)"; exit 1; }
"$venv/bin/python3" -m pip install -q --disable-pip-version-check \
  "safetensors>=0.4" "numpy>=1.24" "tokenizers==0.23.3" "openai>=1.40" "gguf==0.19.0" "jsonschema>=4.17"
echo "setup: Python test references in $venv"
