#!/usr/bin/env bash
# dspark regen from the command line (tiny golden target, CPU): the responses are what
# `dspark generate` emits for the same prompts (plain greedy), --chat renders through the
# model's chat template, --draft with a DSpark drafter (with and without --no-markov) and with
# prompt lookup gives the same tokens, and bad input fails with one "error:" line.
#   bash tests/cli/regen_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
ROOT=$2
M=$ROOT/tests/data/models/qwen3
DRAFTER=$ROOT/tests/data/drafters/qwen3_deepspec
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

cat > "$TMP/prompts.jsonl" <<'EOF'
{"id": "a", "prompt": "Beautiful is better than ugly."}
{"id": "b", "prompt": "Explain recursion to a beginner."}
{"id": "c", "prompt": "Write a haiku about the sea."}
{"id": "d", "prompt": "What is 17 times 23?"}
EOF
N=24

"$DSPARK" regen -m "$M" --prompts "$TMP/prompts.jsonl" --out "$TMP/plain" -n $N --batch 3 \
  --taps 0,2 --shard-tokens 50 > "$TMP/out" 2> "$TMP/err" || { fail "regen: $(cat "$TMP/err")"; }
for f in meta.json responses.jsonl target_weights.safetensors shard_00000.safetensors; do
  [[ -f $TMP/plain/$f ]] || fail "missing $f"
done
n_shards=$(ls "$TMP/plain"/shard_*.safetensors 2>/dev/null | wc -l)
[[ $n_shards -ge 2 ]] || fail "expected several shards with --shard-tokens 50, got $n_shards"

# Each response equals `dspark generate` on the same prompt.
while read -r line; do
  id=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['id'])" "$line")
  prompt=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['prompt'])" "$line")
  want=$("$DSPARK" generate -m "$M" -p "$prompt" -n $N --json | tail -n 1 |
    python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
  got=$(python3 -c "
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j['id'] == sys.argv[2]: print(j['response_tokens'])" "$TMP/plain/responses.jsonl" "$id")
  [[ "$got" == "$want" ]] && echo "ok   prompt $id: $got" || fail "prompt $id: regen $got, generate $want"
done < "$TMP/prompts.jsonl"

# Speculative regen is lossless (same response tokens), and reports tau.
same_tokens() {  # dir
  python3 - "$TMP/plain/responses.jsonl" "$1/responses.jsonl" <<'PY'
import json, sys
a = {json.loads(l)["id"]: json.loads(l)["response_tokens"] for l in open(sys.argv[1])}
b = {json.loads(l)["id"]: json.loads(l)["response_tokens"] for l in open(sys.argv[2])}
sys.exit(0 if a == b else 1)
PY
}
for variant in "dspark --draft $DRAFTER" "dflash --draft $DRAFTER --no-markov" "ngram --draft ngram --gamma 5"; do
  set -- $variant
  name=$1
  shift
  if "$DSPARK" regen -m "$M" --prompts "$TMP/prompts.jsonl" --out "$TMP/$name" -n $N --batch 4 \
      "$@" --json > "$TMP/out" 2> "$TMP/err"; then
    same_tokens "$TMP/$name" && echo "ok   $name: lossless, $(tail -n 1 "$TMP/out")" ||
      fail "$name: tokens differ from plain decoding"
    python3 -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['spec']['rounds'] > 0" \
      "$TMP/$name/meta.json" || fail "$name: no spec telemetry in meta.json"
  else
    fail "$name: $(cat "$TMP/err")"
  fi
done

# --chat: the prompt goes through the model's chat template (prompts_rendered.jsonl).
"$DSPARK" regen -m "$M" --prompts "$TMP/prompts.jsonl" --out "$TMP/chat" -n 4 --chat \
  > /dev/null 2> "$TMP/err" || fail "chat: $(cat "$TMP/err")"
grep -q '<|im_start|>user' "$TMP/chat/prompts_rendered.jsonl" && echo "ok   --chat renders" ||
  fail "--chat did not render the template"

# Errors: one line, usage exit code.
echo '{"id": "x", "messages": [{"role": "user", "content": "hi"}]}' > "$TMP/messages.jsonl"
for args in "--prompts $TMP/messages.jsonl" "--prompts $TMP/prompts.jsonl --taps 0,x" \
    "--prompts $TMP/nonexistent.jsonl"; do
  # shellcheck disable=SC2086
  "$DSPARK" regen -m "$M" --out "$TMP/err_out" $args > /dev/null 2> "$TMP/err"
  rc=$?
  if [[ $rc -eq 2 && $(wc -l < "$TMP/err") -eq 1 ]] && grep -q '^error: ' "$TMP/err"; then
    echo "ok   error ($args): $(cat "$TMP/err")"
  else
    fail "error case ($args): rc $rc, stderr: $(cat "$TMP/err")"
  fi
done

exit $FAILED
