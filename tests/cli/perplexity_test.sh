#!/usr/bin/env bash
# dspark perplexity on the tiny Llama 3: the table and --json agree, --windows limits the windows,
# the windows' count follows the text's tokens, exp(mean NLL) is the perplexity; a missing file, a
# text shorter than one window (exit 2, as other invalid input) and a context below 4 (a usage
# error) are refused with one error line.
#   bash tests/cli/perplexity_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/llama3
[[ -d $M ]] || { echo "SKIP: no fixture at $M"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for i in $(seq 1 40); do echo "The cat sat on the mat number $i, and then it went home."; done > "$TMP/text.txt"
"$DSPARK" perplexity -m "$M" -f "$TMP/text.txt" -c 64 > "$TMP/table.txt" 2> "$TMP/stderr" ||
  fail "perplexity: $(cat "$TMP/stderr")"
grep -q "100%" "$TMP/stderr" || fail "no finished progress bar: $(cat "$TMP/stderr")"
grep -q "^perplexity " "$TMP/table.txt" || fail "no perplexity line: $(cat "$TMP/table.txt")"
"$DSPARK" perplexity -m "$M" -f "$TMP/text.txt" -c 64 --json > "$TMP/all.json" 2> /dev/null
"$DSPARK" perplexity -m "$M" -f "$TMP/text.txt" -c 64 --windows 2 --json > "$TMP/two.json" 2> /dev/null
python3 - "$TMP/table.txt" "$TMP/all.json" "$TMP/two.json" <<'PY'
import json, math, re, sys
table = open(sys.argv[1]).read()
a, b = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
ppl = float(re.search(r"^perplexity\s+([0-9.]+)", table, re.M).group(1))
assert abs(ppl - a["ppl"]) < 1e-3 * a["ppl"], (ppl, a["ppl"])
assert a["windows"] == a["text_tokens"] // 64 >= 3, a
assert a["scored_tokens"] == a["windows"] * (64 - 1 - 32), a
assert abs(math.exp(a["mean_nll"]) - a["ppl"]) < 1e-9 * a["ppl"], a
assert len(a["window_ppl"]) == a["windows"] and b["windows"] == 2, (a, b)
# The first two windows are scored alike in both runs.
assert b["window_ppl"] == a["window_ppl"][:2], (a["window_ppl"], b["window_ppl"])
assert a["bos"] is False  # the fixture's tokenizer adds no BOS
print(f"ppl {a['ppl']:.3f} over {a['windows']} windows ({a['scored_tokens']} tokens)")
PY

expect_error() {  # <rc> <message substring> -- <dspark args...>
  local want_rc=$1 want_msg=$2
  shift 3
  set +e
  "$DSPARK" "$@" > /dev/null 2> "$TMP/err"
  local rc=$?
  set -e
  [[ $rc -eq $want_rc ]] || fail "dspark $*: exit $rc, want $want_rc: $(cat "$TMP/err")"
  [[ $(wc -l < "$TMP/err") -eq 1 ]] || fail "dspark $*: not one error line: $(cat "$TMP/err")"
  grep -qi -- "$want_msg" "$TMP/err" || fail "dspark $*: message lacks '$want_msg': $(cat "$TMP/err")"
  echo "ok   (dspark $*): $(cat "$TMP/err")"
}
echo "Too short." > "$TMP/short.txt"
expect_error 1 "cannot read" -- perplexity -m "$M" -f "$TMP/none.txt"
expect_error 2 "fewer than one window" -- perplexity -m "$M" -f "$TMP/short.txt" -c 64
expect_error 2 "context" -- perplexity -m "$M" -f "$TMP/text.txt" -c 3
echo "PASS"
