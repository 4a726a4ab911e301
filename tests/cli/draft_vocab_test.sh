#!/usr/bin/env bash
# The draft vocabulary end to end: tools/train/make_draft_vocab.py counts the tokens of a regen
# shard (a synthetic one: its counts are known) and writes the most frequent ids; dspark generate
# --draft <drafter fixture> --draft-vocab FILE then gives exactly the plain greedy tokens; a bad
# file, a source without a drafter (for --draft-vocab or --draft-fp8) or --draft-fp8 on the CPU
# exits non-zero with one error line.
#   bash tests/cli/draft_vocab_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/qwen3
DRAFTER=$ROOT/tests/data/drafters/qwen3_deepspec
[[ -d $M && -f $DRAFTER/config.json ]] || { echo "SKIP: no fixtures"; exit 0; }
python3 -c "import numpy" 2>/dev/null || { echo "SKIP: no numpy"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PROMPT="The cat sat on the mat. The cat sat on the"
VOCAB=$(python3 -c "import json; print(json.load(open('$M/config.json'))['vocab_size'])")

# A synthetic regen shard: token t appears (t % 7) + 1 times in the response, and token 3 fills
# the prompt (loss_mask 0), so it only counts with --include-prompts.
mkdir -p "$TMP/regen"
python3 - "$TMP/regen" "$VOCAB" <<'PY'
import json, struct, sys
import numpy as np
out, vocab = sys.argv[1], int(sys.argv[2])
resp = np.concatenate([np.full((t % 7) + 1, t, dtype=np.int32) for t in range(vocab)])
tokens = np.concatenate([np.full(5000, 3, dtype=np.int32), resp])
mask = np.concatenate([np.zeros(5000, np.uint8), np.ones(resp.size, np.uint8)])
tensors = {"tokens": ("I32", tokens), "loss_mask": ("U8", mask)}
header, blobs, off = {}, [], 0
for name, (dt, a) in tensors.items():
    b = a.tobytes()
    header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
with open(f"{out}/shard_00000.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
json.dump({"vocab_size": vocab}, open(f"{out}/meta.json", "w"))
PY
TOOL=$ROOT/tools/train/make_draft_vocab.py
python3 "$TOOL" --size 40 --regen "$TMP/regen" --always 1 --out "$TMP/v.json" 2>/dev/null ||
  fail "make_draft_vocab.py"
python3 - "$TMP/v.json" "$VOCAB" <<'PY' || fail "draft vocabulary contents"
import json, sys
j = json.load(open(sys.argv[1]))
ids, vocab = j["token_ids"], int(sys.argv[2])
# The always-kept id first, then count 7 (t % 7 == 6) in increasing id order.
expect = [1] + [t for t in range(vocab) if t % 7 == 6][:39]
assert ids == expect, (ids[:10], expect[:10])
assert j["size"] == 40 and j["vocab_size"] == vocab, j
PY
python3 "$TOOL" --size 1 --regen "$TMP/regen" --include-prompts --out "$TMP/p.json" 2>/dev/null
python3 -c "import json,sys; assert json.load(open('$TMP/p.json'))['token_ids'] == [3]" ||
  fail "--include-prompts"

tokens() {  # args... -> the "tokens" of the JSON line
  "$DSPARK" generate -m "$M" -p "$PROMPT" -n 32 --temperature 0 --json "$@" | tail -n 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
plain=$(tokens)
# A list holding every token of the plain output and half the rest.
python3 - "$plain" "$VOCAB" "$TMP/half.json" <<'PY'
import ast, json, sys
used, vocab = set(ast.literal_eval(sys.argv[1])), int(sys.argv[2])
json.dump(sorted(used | set(range(0, vocab, 2))), open(sys.argv[3], "w"))
PY
for vocab_file in "$TMP/half.json" "$TMP/v.json"; do
  got=$(tokens --draft "$DRAFTER" --gamma 4 --draft-vocab "$vocab_file")
  [[ $got == "$plain" ]] || fail "--draft-vocab $vocab_file: $got != plain $plain"
done

# Errors: one line, non-zero exit.
expect_error() {  # pattern args...
  local pattern=$1
  shift
  if "$DSPARK" generate -m "$M" -p "$PROMPT" -n 4 "$@" >"$TMP/out" 2>"$TMP/err"; then
    fail "$* should fail"
  fi
  [[ $(wc -l <"$TMP/err") -eq 1 ]] || fail "$*: expected one error line, got $(cat "$TMP/err")"
  grep -q "$pattern" "$TMP/err" || fail "$*: '$(cat "$TMP/err")' lacks '$pattern'"
}
echo "[$VOCAB]" >"$TMP/big.json"
echo "[]" >"$TMP/empty.json"
expect_error "outside the vocabulary" --draft "$DRAFTER" --draft-vocab "$TMP/big.json"
expect_error "non-empty list" --draft "$DRAFTER" --draft-vocab "$TMP/empty.json"
expect_error "applies to DSpark" --draft ngram --draft-vocab "$TMP/v.json"
# --draft-fp8: refused for other sources, and on the CPU (FP8 drafter weights are CUDA + bf16).
expect_error "draft-fp8 applies to DSpark" --draft ngram --draft-fp8
expect_error "need a CUDA device" --draft "$DRAFTER" --draft-fp8 --device cpu
echo "draft_vocab_test: ok"
