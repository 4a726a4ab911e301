#!/usr/bin/env bash
# dspark generate / info / --version on a fixture model: greedy output equals the Hugging Face
# greedy goldens token for token, the text equals the reference tokenizer's decode of the tokens,
# --json's last line parses, seeds reproduce, stop strings cut the text.
#   bash tests/cli/generate_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/llama3
if [[ ! -d $M ]]; then
  echo "SKIP: no fixture at $M (tools/goldens/make_goldens.py)"
  exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The golden prompt 1 and its greedy continuation (goldens.safetensors, from transformers).
python3 "$ROOT/tests/cli/golden_prompt.py" "$M" > "$TMP/golden.json"
PROMPT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompt"])' "$TMP/golden.json")

# --version and info
"$DSPARK" --version | grep -q '^dspark ' || fail "--version"
"$DSPARK" info -m "$M" > "$TMP/info.txt" || fail "info exited $?"
grep -q 'LlamaForCausalLM' "$TMP/info.txt" || fail "info does not name the architecture"
grep -q 'layers *4' "$TMP/info.txt" || fail "info does not print the layer count"
"$DSPARK" info -m "$M" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["num_layers"]==4, d' \
  || fail "info --json"

# Plain text, greedy: streams the text, nothing on stderr.
"$DSPARK" generate -m "$M" -p "$PROMPT" -n 12 --temperature 0 > "$TMP/text.out" 2> "$TMP/text.err" \
  || fail "generate exited $?"
[[ -s $TMP/text.out ]] || fail "no text on stdout"
[[ ! -s $TMP/text.err ]] || fail "stderr not empty: $(cat "$TMP/text.err")"

# --json: last line is one JSON object; greedy tokens == transformers' greedy; text == decode.
"$DSPARK" generate -m "$M" -p "$PROMPT" -n 20 --temperature 0 --json > "$TMP/json.out" \
  || fail "generate --json exited $?"
python3 - "$TMP/json.out" "$TMP/golden.json" "$M" "$TMP/text.out" <<'PY' || fail "JSON checks"
import json, sys
from tokenizers import Tokenizer
out, golden, m, text_out = sys.argv[1:5]
content = open(out, encoding="utf-8", newline="").read()
assert content.endswith("\n"), repr(content[-50:])
json_line = content[:-1].split("\n")[-1]  # split on \n only: the text may hold \x0c, \x85...
j = json.loads(json_line)
g = json.load(open(golden))
for key in ("text", "tokens", "n_prompt", "n_generated", "tok_per_s", "timings_ms"):
    assert key in j, f"missing {key}: {j}"
assert j["n_generated"] == 20 == len(j["tokens"]), j
assert j["n_prompt"] == g["n_prompt"], (j["n_prompt"], g["n_prompt"])
assert j["tokens"] == g["greedy"][:20], (j["tokens"], g["greedy"][:20])
tok = Tokenizer.from_file(f"{m}/tokenizer.json")
ref = tok.decode(j["tokens"], skip_special_tokens=True)
assert j["text"] == ref, (j["text"], ref)
streamed = content[: len(content) - len(json_line) - 1]
assert streamed == ref + "\n" or (streamed == ref and ref.endswith("\n")), (streamed, ref)
assert all(k in j["timings_ms"] for k in ("prefill", "decode", "total")), j
# the first 12 tokens' text (plain run) is a prefix of the 20-token text
first12 = open(text_out, encoding="utf-8", newline="").read()
assert first12.endswith("\n")
assert ref.startswith(first12[:-1]), (first12, ref)
print("json ok:", j["n_generated"], "tokens,", round(j["tok_per_s"], 1), "tok/s")
PY

# Seeded sampling reproduces; another seed changes the tokens (with high probability).
run_tokens() {
  "$DSPARK" generate -m "$M" -p "$PROMPT" -n 16 --temperature 1.5 --top-p 0.95 --seed "$1" --json \
    | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
A=$(run_tokens 7); B=$(run_tokens 7); C=$(run_tokens 8)
[[ $A == "$B" ]] || fail "same seed, different tokens: $A vs $B"
[[ $A != "$C" ]] || fail "seeds 7 and 8 gave the same 16 sampled tokens"

# A stop string taken from the middle of the greedy text: output is the text before it.
STOP=$(python3 - "$TMP/json.out" <<'PY'
import json, sys
content = open(sys.argv[1], encoding="utf-8", newline="").read()
t = json.loads(content[:-1].split("\n")[-1])["text"]
mid = len(t) // 2
s = t[mid:mid + 3]
assert s.strip(), repr(t)
print(s, end="")
PY
)
"$DSPARK" generate -m "$M" -p "$PROMPT" -n 20 --temperature 0 --stop "$STOP" --json > "$TMP/stop.out" \
  || fail "generate --stop exited $?"
python3 - "$TMP/stop.out" "$TMP/json.out" "$STOP" <<'PY' || fail "stop string"
import json, sys
def last_json(path):
    content = open(path, encoding="utf-8", newline="").read()
    return json.loads(content[:-1].split("\n")[-1])
stop_j = last_json(sys.argv[1])
full = last_json(sys.argv[2])["text"]
stop = sys.argv[3]
expected = full[: full.index(stop)]
assert stop_j["text"] == expected, (stop_j["text"], expected)
assert stop_j["finish_reason"] == "stop", stop_j
assert stop_j["n_generated"] < 20, stop_j
PY
echo "PASS"
