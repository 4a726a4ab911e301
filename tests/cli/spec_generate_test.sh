#!/usr/bin/env bash
# dspark generate --draft: greedy text and tokens identical to plain decoding for prompt lookup, a
# draft model (the fixture itself and another fixture) and several --gamma; --json carries the
# speculation telemetry; bad --draft / --gamma values exit non-zero with one error line.
#   bash tests/cli/spec_generate_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/qwen3
OTHER=$MODELS/llama3
[[ -d $M && -d $OTHER ]] || { echo "SKIP: no fixtures in $MODELS"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PROMPT="The cat sat on the mat. The cat sat on the"

tokens() {  # args... -> the "tokens" of the JSON line
  "$DSPARK" generate -m "$M" -p "$PROMPT" -n 40 --temperature 0 --json "$@" | tail -n 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
plain=$(tokens)
for draft in ngram "model:$M" "model:$OTHER" "$M"; do
  for gamma in 1 3 8; do
    got=$(tokens --draft "$draft" --gamma "$gamma")
    [[ $got == "$plain" ]] || fail "--draft $draft --gamma $gamma: $got != plain $plain"
  done
done

# The telemetry object.
"$DSPARK" generate -m "$M" -p "$PROMPT" -n 32 --temperature 0 --draft "model:$M" --gamma 4 \
  --draft-policy fixed --json |
  tail -n 1 > "$TMP/spec.json"
python3 - "$TMP/spec.json" <<'PY' || fail "spec telemetry"
import json, sys
j = json.load(open(sys.argv[1]))
s = j["spec"]
assert s["draft"] == "model" and s["gamma"] == 4 and s["draft_policy"] == "fixed", s
assert s["mean_draft_length"] > 2, s  # 4 per round but the last ones (max_tokens)
assert s["rounds"] > 0 and s["drafted"] >= s["accepted"] > 0, s
assert abs(s["tau"] - s["emitted"] / s["rounds"]) < 1e-9, s
assert s["accepted"] == s["drafted"], "self-drafting must accept every greedy draft"
assert len(s["acceptance_by_position"]) == 4, s
for k in ("draft", "verify", "rest"):
    assert s["timings_ms"][k] >= 0, s
assert j["n_generated"] == 32, j
PY

# Bad values: one error line, non-zero exit.
expect_error() {  # expected-substring args...
  local want=$1
  shift
  if "$DSPARK" generate -m "$M" -p hi "$@" > "$TMP/out" 2> "$TMP/err"; then
    fail "'$*' succeeded"
  fi
  [[ $(wc -l < "$TMP/err") -eq 1 ]] || fail "'$*': expected one stderr line, got: $(cat "$TMP/err")"
  grep -q "^error: .*$want" "$TMP/err" || fail "'$*': stderr lacks '$want': $(cat "$TMP/err")"
}
expect_error "drafter directory" --draft /nonexistent
expect_error "gamma" --draft ngram --gamma -1
expect_error "gamma" --draft ngram --gamma 1000
expect_error "ngram" --draft ngram --ngram-min 3 --ngram-max 2
echo "PASS"
