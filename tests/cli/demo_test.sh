#!/usr/bin/env bash
# dspark demo (what `make run` shows): the chat-templated answer is streamed, the table compares
# plain and speculative decoding measured in the same run, the outputs are identical, and the
# JSON line agrees with `dspark generate` on the same rendered prompt.
#   bash tests/cli/demo_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/qwen3
DRAFTER=$ROOT/tests/data/drafters/qwen3_deepspec
[[ -d $M ]] || { echo "SKIP: no fixtures in $MODELS"; exit 0; }
fail() { echo "FAIL: $*" >&2; exit 1; }
PROMPT="Name three colours. Name three colours."

for draft in ngram "$DRAFTER"; do
  out=$("$DSPARK" demo -m "$M" --draft "$draft" -p "$PROMPT" -n 24 --json | tr -d '\0') ||
    fail "demo --draft $draft exited non-zero: $out"
  grep -q "identical output: yes" <<<"$out" || fail "--draft $draft: outputs differ: $out"
  grep -q "^plain " <<<"$out" && grep -q "^speculative " <<<"$out" || fail "no table: $out"
  json=$(tail -n 1 <<<"$out")
  python3 - "$json" <<'PY' || fail "--draft $draft: bad JSON line: $json"
import json, sys
j = json.loads(sys.argv[1])
assert j["identical"] is True and j["n_generated"] == 24, j
assert j["plain_tok_per_s"] > 0 and j["spec_tok_per_s"] > 0 and j["speedup"] > 0, j
assert j["spec"]["rounds"] > 0 and j["spec"]["drafted"] >= j["spec"]["accepted"], j
PY
done

# The streamed answer is the greedy continuation of the ChatML-rendered prompt (the fixture's
# template), as plain `dspark generate` produces it.
rendered=$'<|im_start|>user\n'"$PROMPT"$'<|im_end|>\n<|im_start|>assistant\n'
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$DSPARK" generate -m "$M" -p "$rendered" -n 24 --temperature 0 --json | tail -n 1 >"$TMP/ref.json"
"$DSPARK" demo -m "$M" --draft ngram -p "$PROMPT" -n 24 >"$TMP/demo.txt"
python3 - "$TMP/ref.json" "$TMP/demo.txt" <<'PY' || fail "demo text differs from generate's"
import json, sys
ref = json.load(open(sys.argv[1]))["text"]
out = open(sys.argv[2], encoding="utf-8", errors="replace").read()
assert ref and ref in out, (ref, out)
PY

# Errors: a missing model and a bad draft source exit non-zero with a message.
if "$DSPARK" demo -m "$ROOT/no/such/model" 2>/dev/null; then fail "missing model accepted"; fi
if "$DSPARK" demo -m "$M" --draft bogus:x 2>/dev/null; then fail "bad --draft accepted"; fi
echo PASS
