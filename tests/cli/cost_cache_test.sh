#!/usr/bin/env bash
# The verify cost cache of --draft-policy adaptive (engine/verify_cost_cache.h) through the CLI:
# dspark generate profiles and stores under $XDG_CACHE_HOME by default, loads it on the next start
# ("verify cost loaded from FILE") with the same tokens; --cost-cache DIR moves it; another --gamma
# misses; a corrupt file is reported, measured again and rewritten; --no-cost-cache neither reads
# nor writes; an unwritable directory is reported and generation goes on; dspark serve and dspark
# demo take the same flags.
#   bash tests/cli/cost_cache_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/qwen3
[[ -d $M ]] || { echo "SKIP: no fixtures in $MODELS"; exit 0; }
TMP=$(mktemp -d)
SERVER=
trap '[[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null; rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PROMPT="The cat sat on the mat. The cat sat on the"
export XDG_CACHE_HOME=$TMP/xdg
DEFAULT=$XDG_CACHE_HOME/dspark/verify-cost

gen() {  # name args... -> $TMP/name.out (the tokens), $TMP/name.err (stderr)
  local name=$1
  shift
  "$DSPARK" generate -m "$M" -p "$PROMPT" -n 24 --temperature 0 --draft ngram --json "$@" \
    2> "$TMP/$name.err" | tail -n 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' > "$TMP/$name.out"
}
files() { find "$1" -type f 2>/dev/null | wc -l; }

# No cache at all: the reference tokens, and nothing written anywhere.
gen plain --no-cost-cache
grep -q "verify cost profiled in" "$TMP/plain.err" || fail "no profile line: $(cat "$TMP/plain.err")"
[[ ! -e $XDG_CACHE_HOME ]] || fail "--no-cost-cache wrote $(find "$XDG_CACHE_HOME")"

# The default directory: measured and stored, then loaded.
gen first
grep -q "verify cost profiled in" "$TMP/first.err" || fail "first start: $(cat "$TMP/first.err")"
[[ $(files "$DEFAULT") == 1 ]] || fail "expected one file in $DEFAULT: $(find "$TMP/xdg")"
FILE=$(find "$DEFAULT" -type f)
gen second
grep -q "verify cost loaded from $FILE" "$TMP/second.err" ||
  fail "second start did not load $FILE: $(cat "$TMP/second.err")"
grep -q "profiled" "$TMP/second.err" && fail "second start profiled again"
cmp -s "$TMP/plain.out" "$TMP/first.out" || fail "tokens differ with the cache (measured)"
cmp -s "$TMP/plain.out" "$TMP/second.out" || fail "tokens differ with the cache (loaded)"
python3 - "$FILE" <<'PY' || fail "cache file contents"
import json, sys
j = json.load(open(sys.argv[1]))
k = j["key"]
assert k["device"] == "cpu" and k["dtype"] == "f32" and k["width"] == 5, k
assert "qwen3" in k["model"] and "model.safetensors" in k["model"], k
assert k["threads"] >= 1 and k["machine"] and k["build"], k
assert len(j["points"]) >= 2 and j["points"][0][0] == 1, j
PY

# Another gamma: another key, measured.
gen gamma3 --gamma 3
grep -q "verify cost profiled in" "$TMP/gamma3.err" || fail "--gamma 3 did not miss"
[[ $(files "$DEFAULT") == 2 ]] || fail "expected two files after --gamma 3"

# A corrupt file: one line, measured again, rewritten (then loaded).
echo '{"key": [' > "$FILE"
gen corrupt
[[ $(grep -c "ignoring the verify cost cache file $FILE" "$TMP/corrupt.err") == 1 ]] ||
  fail "corrupt file not reported once: $(cat "$TMP/corrupt.err")"
grep -q "verify cost profiled in" "$TMP/corrupt.err" || fail "corrupt file not measured again"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$FILE" || fail "not rewritten"
gen rewritten
grep -q "verify cost loaded from $FILE" "$TMP/rewritten.err" || fail "rewritten file not loaded"
cmp -s "$TMP/plain.out" "$TMP/corrupt.out" || fail "tokens differ after a corrupt file"

# --cost-cache DIR: there, not in the default directory.
gen dir1 --cost-cache "$TMP/elsewhere"
gen dir2 --cost-cache "$TMP/elsewhere"
[[ $(files "$TMP/elsewhere") == 1 ]] || fail "--cost-cache DIR: $(find "$TMP/elsewhere")"
grep -q "verify cost loaded from $TMP/elsewhere/" "$TMP/dir2.err" || fail "--cost-cache not loaded"
[[ $(files "$DEFAULT") == 2 ]] || fail "--cost-cache DIR wrote into the default directory"

# --no-cost-cache does not read either, and the two flags exclude each other.
gen off --no-cost-cache
grep -q "verify cost profiled in" "$TMP/off.err" || fail "--no-cost-cache loaded the cache"
if "$DSPARK" generate -m "$M" -p x --cost-cache "$TMP/c" --no-cost-cache 2> "$TMP/both.err"; then
  fail "--cost-cache with --no-cost-cache accepted"
fi

# Unwritable: a directory below a regular file. One line, and the tokens all the same.
touch "$TMP/plain_file"
gen unwritable --cost-cache "$TMP/plain_file/c"
[[ $(grep -c "cannot write the verify cost cache in" "$TMP/unwritable.err") == 1 ]] ||
  fail "unwritable directory: $(cat "$TMP/unwritable.err")"
cmp -s "$TMP/plain.out" "$TMP/unwritable.out" || fail "tokens differ with an unwritable cache"

# dspark serve: the same cache (serve profiles up to --max-batch rows: its own key).
serve_once() {  # name -> $TMP/name.serr once the profile line is printed, then stops the server
  "$DSPARK" serve -m "$M" --draft ngram --port 0 --max-batch 2 --cost-cache "$TMP/serve" \
    > "$TMP/$1.sout" 2> "$TMP/$1.serr" &
  SERVER=$!
  for _ in $(seq 300); do
    grep -q "verify cost" "$TMP/$1.serr" && break
    kill -0 "$SERVER" 2>/dev/null || fail "serve exited: $(cat "$TMP/$1.serr")"
    sleep 0.1
  done
  kill "$SERVER"
  wait "$SERVER" || true
  SERVER=
}
serve_once s1
grep -q "dspark serve: verify cost profiled in" "$TMP/s1.serr" || fail "serve: $(cat "$TMP/s1.serr")"
serve_once s2
grep -q "dspark serve: verify cost loaded from $TMP/serve/" "$TMP/s2.serr" ||
  fail "serve did not load: $(cat "$TMP/s2.serr")"

# dspark demo takes the flags too. (The help is read whole first: with pipefail, grep -q closing
# the pipe at its first match could fail the writer with SIGPIPE.)
help=$("$DSPARK" demo --help)
grep -q -- "--no-cost-cache" <<<"$help" || fail "demo --help lacks --no-cost-cache"
help=$("$DSPARK" serve --help)
grep -q -- "--cost-cache" <<<"$help" || fail "serve --help lacks --cost-cache"
echo "cost cache: OK"
