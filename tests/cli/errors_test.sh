#!/usr/bin/env bash
# dspark fails cleanly: every error case exits non-zero (2 for usage errors, 1 otherwise) with
# exactly one line on stderr starting with "error:", and never crashes (no signal exit).
#   bash tests/cli/errors_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/llama3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0

# expect_error <expected rc: 1|2|nonzero> <substring of the message or ""> -- <dspark args...>
expect_error() {
  local want_rc=$1 want_msg=$2
  shift 3
  "$DSPARK" "$@" > "$TMP/out" 2> "$TMP/err"
  local rc=$?
  local lines
  lines=$(wc -l < "$TMP/err")
  local what="dspark $*"
  if [[ $rc -eq 0 ]]; then
    echo "FAIL ($what): exit 0"; FAILED=1; return
  fi
  if [[ $rc -ge 128 ]]; then
    echo "FAIL ($what): killed by a signal (rc $rc)"; FAILED=1; return
  fi
  if [[ $want_rc != nonzero && $rc -ne $want_rc ]]; then
    echo "FAIL ($what): exit $rc, want $want_rc: $(cat "$TMP/err")"; FAILED=1; return
  fi
  if [[ $lines -ne 1 ]] || ! head -n 1 "$TMP/err" | grep -q '^error: '; then
    echo "FAIL ($what): stderr is not one 'error:' line:"; cat "$TMP/err"; FAILED=1; return
  fi
  if [[ -n $want_msg ]] && ! grep -qi -- "$want_msg" "$TMP/err"; then
    echo "FAIL ($what): message lacks '$want_msg': $(cat "$TMP/err")"; FAILED=1; return
  fi
  echo "ok   ($what) -> rc $rc: $(cat "$TMP/err")"
}

# Usage errors (no model needed).
expect_error 2 "" -- generate -m "$TMP/none" -p hi -n -1
expect_error 2 "" -- generate -m "$TMP/none" -p hi --temperature -1
expect_error 2 "" -- generate -m "$TMP/none" -p hi --top-p 2
expect_error 2 "" -- generate -m "$TMP/none" -p hi --top-p 0
expect_error 2 "--spec-sampling: maximal not in {coupled,rejection}" -- generate -m "$TMP/none" -p hi --spec-sampling maximal
expect_error 2 "--spec-sampling" -- serve -m "$TMP/none" --spec-sampling greedy
expect_error 2 "" -- generate -m "$TMP/none" -p hi --min-p 1.5
expect_error 2 "" -- generate -m "$TMP/none" -p hi --top-k -3
expect_error 2 "" -- generate -m "$TMP/none" -p hi -n lots
expect_error 2 "" -- generate -m "$TMP/none" -p hi --no-such-flag
expect_error 2 "" -- generate -p hi
expect_error 2 "" -- no-such-command
expect_error 2 "" --
expect_error 2 "device" -- generate -m "$TMP/none" -p hi --device tpu
# Missing model directory.
expect_error 1 "$TMP/none" -- generate -m "$TMP/none" -p hi
expect_error 1 "$TMP/none" -- info -m "$TMP/none"

# CUDA in a build without CUDA (or on a machine without a GPU): a clean error, if any.
"$DSPARK" generate -m "$TMP/none" -p hi --device cuda > /dev/null 2> "$TMP/cuda_err"
rc=$?
if [[ $rc -ne 0 ]]; then
  expect_error 1 "" -- generate -m "$TMP/none" -p hi --device cuda
fi

if [[ ! -d $M ]]; then
  echo "SKIP: fixture cases (no fixture at $M)"
  exit $FAILED
fi

copy_fixture() {  # copy_fixture <name>: a scratch copy of the llama3 fixture
  rm -rf "${TMP:?}/$1"
  cp -r "$M" "$TMP/$1"
  echo "$TMP/$1"
}

D=$(copy_fixture garbage_config)
echo '{"architectures": ["LlamaForCausalLM"], "hidden_size": ' > "$D/config.json"
expect_error 1 "config.json" -- generate -m "$D" -p hi
expect_error 1 "config.json" -- info -m "$D"

D=$(copy_fixture not_json)
printf '\x00\x01garbage' > "$D/config.json"
expect_error 1 "config.json" -- generate -m "$D" -p hi

D=$(copy_fixture unknown_arch)
python3 - "$D/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["architectures"] = ["FancyNewForCausalLM"]
json.dump(c, open(sys.argv[1], "w"))
PY
expect_error 1 "FancyNewForCausalLM" -- generate -m "$D" -p hi

D=$(copy_fixture truncated)
size=$(stat -c %s "$D/model.safetensors")
truncate -s $((size / 2)) "$D/model.safetensors"
expect_error 1 "model.safetensors" -- generate -m "$D" -p hi

D=$(copy_fixture truncated_header)
truncate -s 100 "$D/model.safetensors"
expect_error 1 "model.safetensors" -- generate -m "$D" -p hi

D=$(copy_fixture no_weights)
rm "$D/model.safetensors"
expect_error 1 "" -- generate -m "$D" -p hi

D=$(copy_fixture no_tokenizer)
rm "$D/tokenizer.json"
expect_error 1 "tokenizer" -- generate -m "$D" -p hi

D=$(copy_fixture wrong_shape)
python3 - "$D/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["intermediate_size"] = c["intermediate_size"] + 8
json.dump(c, open(sys.argv[1], "w"))
PY
expect_error 1 "gate_proj" -- generate -m "$D" -p hi

expect_error 2 "prompt" -- generate -m "$M" -p ""

if [[ $FAILED -ne 0 ]]; then
  echo "FAIL"
  exit 1
fi
echo "PASS"
