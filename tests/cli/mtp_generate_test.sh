#!/usr/bin/env bash
# dspark generate --draft mtp (the target's MTP layer): greedy tokens identical to plain decoding
# on the MTP fixtures (DeepSeek-V3, GLM-4.5, GLM-5) and several --gamma, the telemetry names the
# source and its default gamma (3); targets without an MTP layer are refused with one error line.
#   bash tests/cli/mtp_generate_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
[[ -d $MODELS/deepseek_v3_mtp && -d $MODELS/glm4_moe_mtp && -d $MODELS/glm_moe_dsa_mtp ]] ||
  { echo "SKIP: no fixtures"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PROMPT="Small models are cheap to run and easy to test."

for family in deepseek_v3 glm4_moe glm_moe_dsa; do
  M=$MODELS/${family}_mtp
  tokens() {
    "$DSPARK" generate -m "$M" -p "$PROMPT" -n 24 --temperature 0 --json "$@" | tail -n 1 |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
  }
  plain=$(tokens)
  for gamma in 1 4; do
    got=$(tokens --draft mtp --gamma "$gamma")
    [[ $got == "$plain" ]] || fail "$family --draft mtp --gamma $gamma: $got != plain $plain"
  done
  # The fixed policy: the adaptive one may stop drafting at once on these random layers (its choice
  # follows measured costs), and the check wants drafts.
  "$DSPARK" generate -m "$M" -p "$PROMPT" -n 16 --temperature 0 --draft mtp --draft-policy fixed \
    --json | tail -n 1 > "$TMP/spec.json"
  python3 - "$TMP/spec.json" <<'PY' || fail "$family spec telemetry"
import json, sys
s = json.load(open(sys.argv[1]))["spec"]
assert s["draft"] == "mtp" and s["gamma"] == 3, s
assert s["rounds"] > 0 and s["drafted"] > 0 and s["drafted"] >= s["accepted"], s
PY
done

expect_error() {  # model expected-substring
  if "$DSPARK" generate -m "$1" -p hi -n 4 --draft mtp > "$TMP/out" 2> "$TMP/err"; then
    fail "--draft mtp on $1 succeeded"
  fi
  [[ $(wc -l < "$TMP/err") -eq 1 ]] || fail "$1: expected one stderr line, got: $(cat "$TMP/err")"
  grep -q "^error: .*$2" "$TMP/err" || fail "$1: stderr lacks '$2': $(cat "$TMP/err")"
}
expect_error "$MODELS/llama3" "no next-token prediction (MTP) layer"
expect_error "$MODELS/deepseek_v3" "drops the MTP layer"
echo "PASS"
