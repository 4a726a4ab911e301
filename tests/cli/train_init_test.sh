#!/usr/bin/env bash
# tools/train/train.py --init / --eval-only / --prompts-file on the tiny golden target (CPU):
# `dspark regen --taps` writes stored shards of short committed training prompts, a run trains a
# few steps and exports, `--init` from that export with no training step (--minutes 0) exports the
# same model.safetensors byte for byte and reports the same held-out tau (at its start and end, and
# equal to the source run's final tau, which is measured on the exported bf16 weights), records
# init_from, `--eval-only --eval-held-out` gives that tau again, the held-out tau by prompt source
# adds up, and an --init whose config does not fit the run is refused with one line naming the
# fields.
#   bash tests/cli/train_init_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
ROOT=$2
M=$ROOT/tests/data/models/qwen3
if ! python3 -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: python3 cannot import torch and numpy (tools/train needs them)"
  exit 0
fi
[[ -d $M ]] || { echo "SKIP: no fixture $M"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }
TRAIN="python3 $ROOT/tools/train/train.py"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# 29 short committed training prompts: three of each template kind, eight stdlib docstrings.
python3 - "$ROOT/tools/train/data/train.jsonl" "$TMP/prompts.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
n, out = collections.Counter(), []
for r in rows:
    kind = r["source"] if r["source"].startswith("template:") else "stdlib"
    if len(r["prompt"]) <= (120 if kind != "stdlib" else 240) and n[kind] < (3 if kind != "stdlib" else 8):
        n[kind] += 1
        out.append(r)
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.writelines(json.dumps(r) + "\n" for r in out)
PY
"$DSPARK" regen -m "$M" --prompts "$TMP/prompts.jsonl" --out "$TMP/regen" -n 24 --batch 32 \
  --taps 0,1,2 > "$TMP/regen.log" 2>&1 || { fail "regen: $(tail -n 3 "$TMP/regen.log")"; exit 1; }

common=(--data "$TMP/regen" --device cpu --layers 1 --markov-rank 8 --gamma 4 --batch 4
        --anchors 8 --val-fraction 0.25 --eval-every 1000 --prompts-file "$TMP/prompts.jsonl")
$TRAIN "${common[@]}" --out "$TMP/a" --max-steps 6 --warmup 1 --lr 3e-3 > "$TMP/a.log" 2>&1 ||
  fail "train: $(tail -n 3 "$TMP/a.log")"
$TRAIN "${common[@]}" --out "$TMP/b" --minutes 0 --init "$TMP/a" > "$TMP/b.log" 2>&1 ||
  fail "--init: $(tail -n 3 "$TMP/b.log")"
$TRAIN "${common[@]}" --eval-only --eval-held-out --init "$TMP/a" --out "$TMP/c" \
  > "$TMP/c.log" 2>&1 || fail "--eval-only: $(tail -n 3 "$TMP/c.log")"
if cmp -s "$TMP/a/model.safetensors" "$TMP/b/model.safetensors"; then
  echo "ok   --init + 0 steps: model.safetensors identical byte for byte"
else
  fail "--init + 0 steps: model.safetensors differs from the source's"
fi
python3 - "$TMP" <<'PY' || FAILED=1
import array, json, os, struct, sys
tmp = sys.argv[1]
def load(*p):
    with open(os.path.join(tmp, *p), encoding="utf-8") as f:
        return json.load(f)
a, b, c = load("a", "train_metrics.json"), load("b", "train_metrics.json"), load("c", "eval_metrics.json")
cfg_b = load("b", "config.json")["dspark_training"]
bad = []
tau = a["final"]["tau_greedy"]
for name, v in (("init eval", b["history"][0]["tau_greedy"]), ("init final", b["final"]["tau_greedy"]),
                ("eval-only", c["eval"]["tau_greedy"])):
    if v != tau:
        bad.append(f"held-out tau {name} {v!r} != source run's {tau!r}")
if a["steps"] != 6 or b["steps"] != 0:
    bad.append(f"steps {a['steps']}, {b['steps']}")
ini = cfg_b.get("init_from") or {}
if ini.get("steps") != 6 or cfg_b.get("cumulative_steps") != 6 or b.get("init_from") != ini:
    bad.append(f"init_from {ini}, cumulative_steps {cfg_b.get('cumulative_steps')}")
if a["val_prompts"] != b["val_prompts"] or len(a["val_prompts"]) != a["data"]["val_sequences"]:
    bad.append("held-out prompts differ")
by = a["final"].get("tau_by_source") or {}
n_val = a["data"]["val_sequences"]
fam = sum(v["sequences"] for g, v in by.items() if ":" not in g)
kinds = sum(v["sequences"] for g, v in by.items() if g.startswith("template:"))
if fam != n_val or kinds != by.get("template", {}).get("sequences") or "unknown" in by:
    bad.append(f"tau_by_source does not add up to {n_val} held-out sequences: {by}")
if c["eval"].get("tau_by_source") != by or b["final"].get("tau_by_source") != by:
    bad.append("tau_by_source differs between the runs")
if len(c["eval"].get("per_sequence", [])) != n_val:
    bad.append("eval-only: per_sequence missing")
# markov_w2 starts at zero: nonzero after --init means the trained weights arrived (read without
# torch, whose import costs seconds).
with open(os.path.join(tmp, "b", "model.safetensors"), "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    e = json.loads(f.read(n))["markov_head.markov_w2.weight"]
    f.seek(8 + n + e["data_offsets"][0])
    w2 = array.array("H", f.read(e["data_offsets"][1] - e["data_offsets"][0]))
if e["dtype"] != "BF16" or not any(v & 0x7FFF for v in w2):
    bad.append("markov_w2 is zero after --init")
for m in bad:
    print("FAIL:", m)
if not bad:
    print(f"ok   held-out tau {tau!r} in all four places; init_from {ini['steps']} steps; "
          f"tau by source: " + ", ".join(f"{g} {v['tau_greedy']}/{v['sequences']}" for g, v in by.items()))
sys.exit(1 if bad else 0)
PY

# A config that does not fit: refused before training, one line naming each field.
$TRAIN "${common[@]}" --out "$TMP/d" --minutes 0 --init "$TMP/a" --markov-rank 4 \
  --gamma 5 > "$TMP/d.log" 2>&1
rc=$?
err=$(grep -- "--init" "$TMP/d.log" | grep -v "^\[train")
if [[ $rc -ne 0 && $(wc -l <<< "$err") -eq 1 && $err == *"markov_rank 8 != 4 (--markov-rank)"* &&
      $err == *"block_size 4 != 5 (--gamma)"* && ! -e $TMP/d/model.safetensors ]]; then
  echo "ok   mismatch refused: $err"
else
  fail "mismatch: rc $rc: $(cat "$TMP/d.log")"
fi
exit $FAILED
