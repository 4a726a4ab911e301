#!/usr/bin/env bash
# Coupled vs rejection speculative sampling on the bundled pair (SmolLM2-135M-Instruct Q4_1 and its
# DSpark drafter): held-out test prompts through the chat template, T = 0.7 and 1.0 with top-p 0.9,
# one bench_spec run per (mode, T). Prints tau and acceptance of each mode; coupled runs must give
# exactly the plain outputs (bench_spec counts outputs differing from plain and exits 3 when any
# does, and so does this script).
#   bench/coupled_eval.sh [BENCH_SPEC] [bench_spec flags, e.g. --device cuda]
# Environment: N_PROMPTS (64), MAX_TOKENS (64), MODES ("coupled rejection"), TEMPS ("0.7 1.0"),
# SEED (1), OUT (a directory for the JSON results; default: a temporary one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${1:-$root/build/bin/bench_spec}
[ $# -gt 0 ] && shift
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
drafter="$root/models/SmolLM2-135M-Instruct-DSpark"
[ -x "$bench" ] || { echo "coupled_eval: no bench_spec at $bench (build it: ninja bench_spec)" >&2; exit 1; }
[ -f "$model" ] || bash "$root/scripts/fetch_default_model.sh"
[ -f "$drafter/config.json" ] || { echo "coupled_eval: no drafter in $drafter" >&2; exit 1; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
status=0
printf '%-10s %4s %8s %6s %11s %21s\n' mode T prompts tau acceptance "differing from plain"
for mode in ${MODES:-coupled rejection}; do
  for t in ${TEMPS:-0.7 1.0}; do
    json="$out/coupled_eval_${mode}_T$t.json"
    rc=0
    "$bench" -m "$model" --draft "$drafter" --gamma 7 --prompts "$root/tools/train/data/test.jsonl" \
      --n-prompts "${N_PROMPTS:-64}" -n "${MAX_TOKENS:-64}" --chat --eos --temperature "$t" \
      --top-p 0.9 --seed "${SEED:-1}" --spec-sampling "$mode" --json "$json" "$@" \
      >"$out/coupled_eval_${mode}_T$t.log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
      echo "coupled_eval: bench_spec failed ($mode, T $t), see $out/coupled_eval_${mode}_T$t.log" >&2
      exit 1
    fi
    python3 - "$json" "$mode" "$t" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["speculative"]
differ = str(s["mismatches"]) if sys.argv[2] == "coupled" else "(not compared)"
print(f"{sys.argv[2]:<10} {sys.argv[3]:>4} {j['prompts']:>8} {s['spec']['tau']:>6.2f} "
      f"{s['spec']['acceptance']:>11.3f} {differ:>21}")
EOF
    [ "$mode" = coupled ] && [ "$rc" -eq 3 ] && status=3
  done
done
echo "results: $out"
exit $status
