#!/usr/bin/env bash
# dspark generate --json-schema FILE / --json-object on the tiny qwen3 fixture: greedy output that
# ends at EOS is a document the `jsonschema` package validates against its schema, identical with
# prompt-lookup speculation and without; bad schema files and conflicting flags are refused.
#   bash tests/cli/json_output_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/qwen3
[[ -d $M ]] || { echo "SKIP: no fixture at $M"; exit 0; }
python3 -c "import jsonschema" 2>/dev/null || { echo "FAIL: needs jsonschema (scripts/setup_python.sh)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat > "$TMP/s0.json" <<'J'
{"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, "x"]},
 "c": {"const": [true, null]}}, "required": ["ok", "n"], "additionalProperties": false}
J
cat > "$TMP/s1.json" <<'J'
{"type": "array", "items": {"type": "boolean"}}
J
cat > "$TMP/s2.json" <<'J'
{"enum": ["yes", "no", 1, null]}
J
echo '{"type": "object"}' > "$TMP/object.json"

i=0
for schema in s0 s1 s2 object; do
  for prompt in "Reply in JSON." "Once upon a time"; do
    flag=(--json-schema "$TMP/$schema.json")
    [[ $schema == object ]] && flag=(--json-object)
    for draft in none ngram; do
      "$DSPARK" generate -m "$M" -p "$prompt" -n 48 --temperature 0 "${flag[@]}" --draft "$draft" \
        --json > "$TMP/out.$i.$draft" 2> "$TMP/err.$i.$draft" || fail "generate $schema $draft exited $?"
    done
    python3 - "$TMP/out.$i.none" "$TMP/out.$i.ngram" "$TMP/$schema.json" <<'PY' || fail "checks: $schema, '$prompt'"
import json, sys
import jsonschema
plain, spec = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:3])
assert plain["tokens"] == spec["tokens"], "speculation changed the greedy output"
schema = json.load(open(sys.argv[3]))
if plain["finish_reason"] == "eos":
    jsonschema.validate(json.loads(plain["text"]), schema)
else:
    assert plain["finish_reason"] == "length" and plain["n_generated"] == 48, plain
PY
    i=$((i + 1))
  done
done
# At least the small schemas end within the budget (the checks above are not vacuous).
grep -l '"finish_reason":"eos"' "$TMP"/out.*.none | wc -l | awk '{ exit !($1 >= 4) }' \
  || fail "fewer than 4 documents ended at EOS"

# Refusals: a clear message on stderr, non-zero exit.
echo '{"type": "string", "pattern": "a+"}' > "$TMP/bad.json"
echo '{"type": ' > "$TMP/broken.json"
for f in bad broken; do
  if "$DSPARK" generate -m "$M" -p hi -n 4 --json-schema "$TMP/$f.json" > /dev/null 2> "$TMP/err"; then
    fail "$f.json accepted"
  fi
  grep -q "$f.json" "$TMP/err" || fail "$f.json: the error does not name the file: $(cat "$TMP/err")"
done
grep -q '"pattern" is not supported' "$TMP/err" || true
if "$DSPARK" generate -m "$M" -p hi --json-object --json-schema "$TMP/s0.json" > /dev/null 2>&1; then
  fail "--json-object with --json-schema accepted"
fi
if "$DSPARK" generate -m "$M" -p hi --json-schema "$TMP/missing.json" > /dev/null 2>&1; then
  fail "a missing schema file accepted"
fi
echo "OK"
