#!/usr/bin/env bash
# dspark eval: a prompt set with categories, a multi-turn item and a raw (code completion) item;
# the table and the JSON agree, every output equals plain decoding, a second turn's prompt holds
# the first answer, --batch gives the same tau and outputs as batch 1, and bad prompt sets fail
# with a message naming the line.
#   bash tests/cli/eval_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/qwen3
DRAFTER=$ROOT/tests/data/drafters/qwen3_deepspec
[[ -d $M ]] || { echo "SKIP: no fixtures in $MODELS"; exit 0; }
fail() { echo "FAIL: $*" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cat >"$TMP/set.jsonl" <<'EOF'
{"id": "w1", "category": "writing", "source": "test", "prompt": "Name three colours. Name three colours."}
{"id": "w2", "category": "writing", "prompt": "Write a line about the sea."}
{"id": "m1", "category": "multi-turn", "turns": ["Count to five.", "Now count back down from what you reached."]}

{"id": "c1", "category": "completion", "prompt": "def add(a, b):\n    return", "raw": true}
EOF

for draft in ngram "$DRAFTER"; do
  out=$("$DSPARK" eval -m "$M" --draft "$draft" --prompts "$TMP/set.jsonl" -n 12 --gamma 4 \
    --json "$TMP/full.json" 2>"$TMP/err.txt") || fail "--draft $draft exited non-zero: $out $(cat "$TMP/err.txt")"
  for row in writing multi-turn completion overall; do
    grep -q "^$row " <<<"$out" || fail "--draft $draft: no table row $row: $out"
  done
  grep -q "m1 turn 2 (multi-turn)" "$TMP/err.txt" || fail "no progress line: $(cat "$TMP/err.txt")"
  tail -n 1 <<<"$out" >"$TMP/line.json"
  python3 - "$TMP/line.json" "$TMP/full.json" <<'PY' || fail "--draft $draft: bad JSON"
import json, sys
line, full = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
o = line["overall"]
assert o["prompts"] == 4 and o["turns"] == 5 and o["identical"] == 5, o
assert o["rounds"] > 0 and o["tau"] >= 1 and len(o["acceptance_by_position"]) == 4, o
assert line["categories"]["multi-turn"]["turns"] == 2, line["categories"]
assert line["categories"]["writing"]["prompts"] == 2, line["categories"]
assert line["gamma"] == 4 and line["max_tokens"] == 12 and "turns" not in line, line
turns = {(t["id"], t["turn"]): t for t in full["turns"]}
assert len(turns) == 5 and all(t["identical"] for t in turns.values()), full["turns"]
# The second turn's prompt holds the first turn's prompt and the target's answer to it.
first, second = turns[("m1", 0)], turns[("m1", 1)]
assert second["n_prompt"] > first["n_prompt"] + first["n_generated"], (first, second)
# The raw item is not chat-rendered: a shorter prompt than the chat items'.
assert turns[("c1", 0)]["n_prompt"] < turns[("w2", 0)]["n_prompt"], turns
PY
done

# --batch: the same rounds, acceptance and outputs per turn as batch 1 (f32).
"$DSPARK" eval -m "$M" --draft "$DRAFTER" --prompts "$TMP/set.jsonl" -n 12 --gamma 4 -q \
  --batch 3 --json "$TMP/batch.json" >/dev/null || fail "--batch 3 failed"
python3 - "$TMP/full.json" "$TMP/batch.json" <<'PY' || fail "--batch 3 differs from batch 1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
key = lambda t: (t["id"], t["turn"])
ta, tb = sorted(a["turns"], key=key), sorted(b["turns"], key=key)
fields = lambda t: (key(t), t["n_generated"], t["output_hash"], t["tau"], t["accepted_by_position"])
assert [fields(t) for t in ta] == [fields(t) for t in tb], (ta, tb)
assert b["batch"] == 3 and b["overall"]["identical"] == 5
assert len({t["output_hash"] for t in ta}) == 5, ta  # a hash of each output, not a constant
PY

# The drafter ablations: --no-markov drafts from the backbone alone (other drafts, the same
# outputs), --no-thresholds; both are in the JSON, and refused for sources they do not apply to.
"$DSPARK" eval -m "$M" --draft "$DRAFTER" --prompts "$TMP/set.jsonl" -n 12 --gamma 4 -q \
  --no-markov --no-thresholds --json "$TMP/ablated.json" >/dev/null 2>"$TMP/err.txt" ||
  fail "--no-markov --no-thresholds failed: $(cat "$TMP/err.txt")"
grep -q "Markov head off, no pruning" "$TMP/err.txt" || fail "no ablation in the header: $(cat "$TMP/err.txt")"
python3 - "$TMP/full.json" "$TMP/ablated.json" <<'PY' || fail "--no-markov: bad result"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["markov"] is True and a["thresholds"] is True, a
assert b["markov"] is False and b["thresholds"] is False and b["overall"]["identical"] == 5, b
key = lambda t: (t["id"], t["turn"])
ha = {key(t): t["output_hash"] for t in a["turns"]}
hb = {key(t): t["output_hash"] for t in b["turns"]}
assert ha == hb, (ha, hb)  # the target's output does not depend on the drafter
da = [t["accepted_by_position"] for t in sorted(a["turns"], key=key)]
db = [t["accepted_by_position"] for t in sorted(b["turns"], key=key)]
assert da != db, "the Markov head changes no draft"
PY
for bad in "ngram --no-markov:applies to DSpark drafters" \
  "ngram --no-thresholds:applies to DSpark / DFlash drafters" \
  "$ROOT/tests/data/drafters/qwen3_dflash --no-markov:has no Markov head"; do
  args=${bad%%:*}
  # shellcheck disable=SC2086
  err=$("$DSPARK" eval -m "$M" --draft $args --prompts "$TMP/set.jsonl" -n 4 -q 2>&1 >/dev/null) &&
    fail "accepted: --draft $args"
  grep -q -- "${bad#*:}" <<<"$err" || fail "--draft $args: $err"
done

# --draft-policy: fixed by default (the JSON says so); adaptive keeps every output identical.
grep -q '"draft_policy": *"fixed"' "$TMP/line.json" || fail "no draft_policy fixed: $(cat "$TMP/line.json")"
out=$("$DSPARK" eval -m "$M" --draft "$DRAFTER" --prompts "$TMP/set.jsonl" -n 12 --gamma 4 -q \
  --draft-policy adaptive --no-cost-cache) || fail "--draft-policy adaptive failed: $out"
python3 -c 'import json, sys; j = json.loads(sys.argv[1].splitlines()[-1]);
assert j["draft_policy"] == "adaptive" and j["overall"]["identical"] == 5, j' "$out" ||
  fail "--draft-policy adaptive: $out"

# --limit: the first N items.
out=$("$DSPARK" eval -m "$M" --draft ngram --prompts "$TMP/set.jsonl" -n 8 --limit 1 -q)
grep -q '"prompts":1' <<<"$(tail -n 1 <<<"$out")" || fail "--limit 1: $out"

# Bad prompt sets: one-line errors naming the file and line.
expect_error() {  # file-content expected-substring
  printf '%s\n' "$1" >"$TMP/bad.jsonl"
  if err=$("$DSPARK" eval -m "$M" --draft ngram --prompts "$TMP/bad.jsonl" 2>&1 >/dev/null); then
    fail "accepted: $1"
  fi
  grep -q -- "$2" <<<"$err" || fail "error for '$1' lacks '$2': $err"
}
expect_error '{"prompt": "a", "turns": ["b"]}' 'line 1: give exactly one of'
expect_error '{"id": "x"}' 'line 1: give exactly one of'
expect_error '{"turns": []}' 'non-empty list'
expect_error '{"turns": ["a", 3]}' 'must hold strings'
expect_error '{"prompt": ""}' 'empty prompt'
expect_error '{"turns": ["a", "b"], "raw": true}' 'raw item'
printf '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n' >"$TMP/dup.jsonl"
err=$("$DSPARK" eval -m "$M" --draft ngram --prompts "$TMP/dup.jsonl" 2>&1 >/dev/null) &&
  fail "duplicate id accepted"
grep -q "line 2: duplicate id 'a'" <<<"$err" || fail "duplicate id: $err"
expect_error 'not json' 'line 1'
: >"$TMP/empty.jsonl"
err=$("$DSPARK" eval -m "$M" --draft ngram --prompts "$TMP/empty.jsonl" 2>&1 >/dev/null) &&
  fail "empty set accepted"
grep -q "no prompts" <<<"$err" || fail "empty set: $err"
err=$("$DSPARK" eval -m "$M" --draft ngram --prompts "$TMP/none.jsonl" 2>&1 >/dev/null) &&
  fail "missing file accepted"
grep -q "cannot read" <<<"$err" || fail "missing file: $err"
err=$("$DSPARK" eval -m "$M" --draft none --prompts "$TMP/set.jsonl" 2>&1 >/dev/null) &&
  fail "--draft none accepted"
grep -q "compares a draft source" <<<"$err" || fail "--draft none: $err"
echo PASS
