#!/usr/bin/env bash
# DeepSeek-V3, GLM-4.5 and GLM-5 GGUF files (llama.cpp's `deepseek2` / `glm4moe` / `glm-dsa`
# architectures): the tiny golden checkpoints written as GGUF by tools/gguf/make_fixtures.py
# --deepseek-moe (as llama.cpp's converter lays them out: MLA's kv_b_proj split into attn_k_b /
# attn_v_b, stacked and shared experts, the score correction as exp_probs_b, glm4moe's
# block_count counting its next-token layer, glm-dsa's indexer keys and tensors) load through
# dspark info / generate; their greedy tokens for the golden prompt equal
# transformers' (goldens.safetensors), and their log-probabilities (the chosen token and the 5
# most probable) equal those of the same checkpoint loaded from safetensors within 1e-4. The MTP
# fixtures (*_mtp) written the same way with their blk.4.nextn.* tensors: `--draft mtp` from the
# GGUF file emits plain greedy's tokens and (with --draft-policy fixed) drafts / accepts what it
# does from safetensors.
#   bash tests/cli/gguf_moe_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
[[ -d $MODELS/deepseek_v3 && -d $MODELS/glm4_moe && -d $MODELS/glm_moe_dsa ]] ||
  { echo "SKIP: no fixtures"; exit 0; }
python3 -c "import gguf, numpy, safetensors" 2>/dev/null || { echo "SKIP: no gguf package"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for pair in deepseek_v3:deepseek2:DeepseekV3ForCausalLM glm4_moe:glm4moe:Glm4MoeForCausalLM \
  glm_moe_dsa:glm-dsa:GlmMoeDsaForCausalLM; do
  IFS=: read -r name arch want <<< "$pair"
  M=$MODELS/$name
  G=$TMP/$arch.gguf
  python3 "$ROOT/tools/gguf/make_fixtures.py" --deepseek-moe "$M" "$G" "$arch" > /dev/null ||
    fail "writing $arch.gguf"
  "$DSPARK" info -m "$G" > "$TMP/info.txt" || fail "info $arch exited $?"
  grep -q "$want" "$TMP/info.txt" || fail "info does not say $want: $(cat "$TMP/info.txt")"
  python3 "$ROOT/tests/cli/golden_prompt.py" "$M" > "$TMP/golden.json"
  PROMPT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt"])' "$TMP/golden.json")
  "$DSPARK" generate -m "$G" -p "$PROMPT" -n 16 --temperature 0 --json --logprobs 5 \
    > "$TMP/gguf.out" 2> "$TMP/err" || fail "generate $arch: $(cat "$TMP/err")"
  "$DSPARK" generate -m "$M" -p "$PROMPT" -n 16 --temperature 0 --json --logprobs 5 \
    > "$TMP/st.out" 2> "$TMP/err" || fail "generate $name: $(cat "$TMP/err")"
  python3 - "$TMP/gguf.out" "$TMP/st.out" "$TMP/golden.json" "$arch" <<'PY' || fail "$arch"
import json, sys
def last(path):
    return json.loads(open(path, encoding="utf-8").read().rstrip("\n").split("\n")[-1])
g_out, st_out, golden, arch = last(sys.argv[1]), last(sys.argv[2]), json.load(open(sys.argv[3])), sys.argv[4]
assert g_out["n_prompt"] == golden["n_prompt"], (g_out["n_prompt"], golden["n_prompt"])
assert g_out["tokens"] == golden["greedy"][:16], (g_out["tokens"], golden["greedy"][:16])
worst = 0.0
for a, b in zip(g_out["logprobs"], st_out["logprobs"], strict=True):
    assert a["token"] == b["token"] and [t for t, _ in a["top"]] == [t for t, _ in b["top"]], (a, b)
    for (_, x), (_, y) in zip(a["top"], b["top"]):
        worst = max(worst, abs(x - y))
assert worst <= 1e-4, f"log-probabilities differ by {worst}"
print(f"{arch}.gguf: 16 greedy tokens equal transformers', log-probabilities within {worst:.1e} "
      "of the safetensors load")
PY
done

for pair in deepseek_v3:deepseek2 glm4_moe:glm4moe; do
  IFS=: read -r name arch <<< "$pair"
  M=$MODELS/${name}_mtp
  [[ -d $M ]] || continue
  G=$TMP/${arch}_mtp.gguf
  python3 "$ROOT/tools/gguf/make_fixtures.py" --deepseek-moe "$M" "$G" "$arch" > /dev/null ||
    fail "writing ${arch}_mtp.gguf"
  run() {  # model [args]: the last JSON line of a greedy generation
    "$DSPARK" generate -m "$1" -p "Small models are cheap to run and easy to test." -n 24 \
      --temperature 0 --json "${@:2}" 2> "$TMP/err" | tail -n 1 || fail "generate $*: $(cat "$TMP/err")"
  }
  run "$G" > "$TMP/plain.json"
  run "$G" --draft mtp --draft-policy fixed > "$TMP/gguf_mtp.json"
  run "$M" --draft mtp --draft-policy fixed > "$TMP/st_mtp.json"
  python3 - "$TMP/plain.json" "$TMP/gguf_mtp.json" "$TMP/st_mtp.json" "$arch" <<'PY' || fail "$arch mtp"
import json, sys
plain, gguf, st = (json.load(open(p)) for p in sys.argv[1:4])
assert gguf["tokens"] == plain["tokens"], (gguf["tokens"], plain["tokens"])
assert gguf["tokens"] == st["tokens"], (gguf["tokens"], st["tokens"])
g, s = gguf["spec"], st["spec"]
assert g["draft"] == "mtp" and g["drafted"] > 0, g
assert (g["rounds"], g["drafted"], g["accepted"]) == (s["rounds"], s["drafted"], s["accepted"]), (g, s)
print(f"{sys.argv[4]}_mtp.gguf --draft mtp: plain greedy's tokens, {g['accepted']}/{g['drafted']} "
      "drafts accepted as from safetensors")
PY
done
