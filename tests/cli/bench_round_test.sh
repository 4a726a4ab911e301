#!/usr/bin/env bash
# bench_round on the CPU with the tiny golden target: a sweep of --context x --batch measures every
# combination (JSON "runs", with batch, context, decode tok/s = batch / step time, the verify
# width and, with --draft, the round), a single combination keeps the flat JSON layout,
# --graphs-only drops the eager verify widths and the back-to-back loops, the decode step's wall
# times per engine step are there (the prefilling one and one per round), and bad lists (or
# --graphs-only without --graphs) are refused with exit code 2 and one error line. The bench binary sits next to dspark
# (DSPARK_BUILD_BENCH); without it the test is skipped.
#   bash tests/cli/bench_round_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
ROOT=$2
BENCH=$(dirname "$DSPARK")/bench_round
M=$ROOT/tests/data/models/qwen3
[[ -x $BENCH ]] || { echo "SKIP: no $BENCH (benchmarks not built)"; exit 0; }
[[ -d $M ]] || { echo "SKIP: no fixture $M"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

"$BENCH" -m "$M" --device cpu --context 24,40 --batch 1,3 --rounds 2 --verify-k 2 \
  --draft ngram --gamma 3 --json "$TMP/sweep.json" >"$TMP/sweep.out" 2>&1 ||
  fail "sweep exited $?: $(tail -n 3 "$TMP/sweep.out")"
[[ $(grep -c '^context .*, batch ' "$TMP/sweep.out") == 4 ]] || fail "expected 4 tables"
python3 - "$TMP/sweep.json" <<'PY' || FAILED=1
import json, sys
d = json.load(open(sys.argv[1]))
runs = d.get("runs", [])
def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
check([(r["context"], r["batch"]) for r in runs] == [(24, 1), (24, 3), (40, 1), (40, 3)],
      f"runs: {[(r.get('context'), r.get('batch')) for r in runs]}")
for r in runs:
    step = r["decode_step_ms"]
    check(step > 0 and abs(r["decode_tok_per_s"] - r["batch"] / (step * 1e-3)) < 1e-6 * r["decode_tok_per_s"],
          f"tok/s of {r['context']}x{r['batch']}: {r['decode_tok_per_s']} for {step} ms")
    check(r["verify_ms"]["2"] > 0, "verify width 2")
    check(r["draft"]["round_ms"] > 0 and r["draft"]["rounds"] > 0, "draft round")
check("decode_step_ms" not in d and d["device"] == "cpu", "sweep top level")
PY

"$BENCH" -m "$M" --device cpu --context 32 --batch 2 --rounds 2 --verify-k 1 \
  --json "$TMP/one.json" >"$TMP/one.out" 2>&1 || fail "single exited $?"
python3 - "$TMP/one.json" <<'PY' || FAILED=1
import json, sys
d = json.load(open(sys.argv[1]))
if "runs" in d or d.get("batch") != 2 or d.get("context") != 32 or d.get("decode_step_ms", 0) <= 0:
    print("FAIL: single combination layout", sorted(d))
    sys.exit(1)
# Every engine step's wall time: the prefilling step, then one per round.
steps = d.get("decode_steps_ms", [])
if len(steps) != 3 or min(steps) <= 0:
    print("FAIL: decode_steps_ms", steps)
    sys.exit(1)
PY

"$BENCH" -m "$M" --device cpu --context 32 --rounds 2 --verify-k 1,2 --graphs --graphs-only \
  --json "$TMP/quick.json" >"$TMP/quick.out" 2>&1 || fail "graphs-only exited $?"
python3 - "$TMP/quick.json" <<'PY' || FAILED=1
import json, sys
d = json.load(open(sys.argv[1]))
ok = ("verify_ms" not in d and "forward_loop" not in d and d.get("decode_step_ms", 0) > 0
      and sorted(d.get("graphs", {}).get("verify_ms", {})) == ["1", "2"])
if not ok:
    print("FAIL: --graphs-only layout", sorted(d), sorted(d.get("graphs", {})))
    sys.exit(1)
PY

for bad in "--batch 0" "--batch 1,x" "--context 0" "--verify-k a" "--graphs-only"; do
  # shellcheck disable=SC2086
  "$BENCH" -m "$M" --device cpu $bad >"$TMP/bad.out" 2>&1
  rc=$?
  [[ $rc == 2 ]] || fail "$bad: exit $rc (want 2)"
  grep -q '^error: ' "$TMP/bad.out" || fail "$bad: no error line: $(head -n 2 "$TMP/bad.out")"
done

[[ $FAILED == 0 ]] && echo "bench_round_test: OK"
exit $FAILED
