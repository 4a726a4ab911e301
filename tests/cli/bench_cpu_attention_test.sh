#!/usr/bin/env bash
# bench_cpu_attention: a short sweep gives one row per (context, queries) in its table and JSON,
# for an f32 and a bf16 cache and --resident; a bad --kv-dtype or head split is a clear error.
#   bash tests/cli/bench_cpu_attention_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
BENCH=$(dirname "$DSPARK")/bench_cpu_attention
[[ -x $BENCH ]] || { echo "SKIP: no $BENCH (benchmarks not built)"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

for args in "--kv-dtype f32" "--kv-dtype bf16 --resident"; do
  # shellcheck disable=SC2086  # two words
  "$BENCH" --contexts 40,300 --queries 1,3 --layers 2 --model-layers 4 --min-ms 2 $args \
    --json "$TMP/a.json" >"$TMP/a.out" 2>&1 || fail "$args exited $?: $(tail -n 3 "$TMP/a.out")"
  [[ $(grep -cE '^\| (40|300) ' "$TMP/a.out") == 4 ]] || fail "$args: expected 4 table rows"
  python3 - "$TMP/a.json" "$args" <<'PY' || FAILED=1
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"]
assert [(r["context"], r["queries"]) for r in rows] == [(40, 1), (40, 3), (300, 1), (300, 3)], rows
resident = "--resident" in sys.argv[2]
for r in rows:
    assert r["ms_per_call"] > 0 and r["gbs"] > 0, r
    assert abs(r["ms_per_token"] - 4 * r["ms_per_call"]) < 1e-9, r
    assert r["copies"] == (1 if resident else 2), r
    size = 2 if "bf16" in sys.argv[2] else 4
    assert r["kv_bytes"] == 2 * (r["context"] + r["queries"]) * 3 * 64 * size, r
PY
done
"$BENCH" --kv-dtype q8_0 --contexts 40 >"$TMP/e.out" 2>&1 && fail "--kv-dtype q8_0 accepted"
grep -q "kv-dtype must be" "$TMP/e.out" || fail "no clear --kv-dtype error: $(cat "$TMP/e.out")"
"$BENCH" --heads 8 --kv-heads 3 --contexts 40 >"$TMP/e.out" 2>&1 && fail "--heads 8 / 3 accepted"
grep -q "not a multiple" "$TMP/e.out" || fail "no clear head error: $(cat "$TMP/e.out")"
[[ $FAILED == 0 ]] && echo "bench_cpu_attention_test: OK"
exit $FAILED
