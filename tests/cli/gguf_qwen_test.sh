#!/usr/bin/env bash
# Qwen2 / Qwen3 GGUF files (llama.cpp's `qwen2` / `qwen3` architectures): the tiny golden
# checkpoints written as GGUF by tools/gguf/make_fixtures.py --qwen-dense (the gguf package's
# writer, every tensor F32: q/k rows as stored, Qwen2's q/k/v biases, Qwen3's q/k norms, Qwen2's
# tied embeddings without output.weight) load through dspark generate / info, and their greedy
# tokens for the golden prompt equal transformers' (goldens.safetensors), with the same prompt
# length (the GGUF tokenizer encodes as tokenizer.json does).
#   bash tests/cli/gguf_qwen_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
[[ -d $MODELS/qwen3 && -d $MODELS/qwen2 ]] || { echo "SKIP: no fixtures"; exit 0; }
python3 -c "import gguf, numpy, safetensors" 2>/dev/null || { echo "SKIP: no gguf package"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for arch in qwen3 qwen2; do
  M=$MODELS/$arch
  python3 "$ROOT/tools/gguf/make_fixtures.py" --qwen-dense "$M" "$TMP/$arch.gguf" "$arch" \
    > /dev/null || fail "writing $arch.gguf"
  python3 "$ROOT/tests/cli/golden_prompt.py" "$M" > "$TMP/golden.json"
  PROMPT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt"])' "$TMP/golden.json")
  "$DSPARK" info -m "$TMP/$arch.gguf" > "$TMP/info.txt" || fail "info $arch exited $?"
  want=$([[ $arch == qwen3 ]] && echo Qwen3ForCausalLM || echo Qwen2ForCausalLM)
  grep -q "$want" "$TMP/info.txt" || fail "info does not say $want: $(cat "$TMP/info.txt")"
  "$DSPARK" generate -m "$TMP/$arch.gguf" -p "$PROMPT" -n 16 --temperature 0 --json \
    > "$TMP/json.out" 2> "$TMP/err" || fail "generate $arch: $(cat "$TMP/err")"
  python3 - "$TMP/json.out" "$TMP/golden.json" "$arch" <<'PY' || fail "$arch against the goldens"
import json, sys
out, golden, arch = sys.argv[1:4]
j = json.loads(open(out, encoding="utf-8").read().rstrip("\n").split("\n")[-1])
g = json.load(open(golden))
assert j["n_prompt"] == g["n_prompt"], (j["n_prompt"], g["n_prompt"])
assert j["tokens"] == g["greedy"][:16], (j["tokens"], g["greedy"][:16])
print(f"{arch}.gguf: {j['n_prompt']} prompt tokens, 16 greedy tokens equal transformers'")
PY
done
