#!/usr/bin/env bash
# tools/train/target_forward.py (the drafter training's own PyTorch forward of the target) against
# dspark on the CPU, in f32: `dspark regen --all-target-weights --hidden-dtype f32` writes every
# weight and the taps / final hidden states of a few generated sequences, the PyTorch forward
# recomputes them from those weights (tools/train/check_target_forward.py), and every tap and the
# final hidden state must agree within 1e-4 relative RMS (measured: <= 2e-6). Tiny golden models
# of each Llama-family variant (Llama 3 rope scaling, Qwen2 biases, Qwen3 q/k norms, Mistral
# sliding window, YaRN; a tiny GGUF with rope_freqs), and the bundled SmolLM2 GGUF when models/ holds it.
#   bash tests/cli/target_forward_test.sh <path-to-dspark> <repo-root>
set -uo pipefail
DSPARK=$1
ROOT=$2
MODELS=$ROOT/tests/data/models
if ! python3 -c "import torch, numpy" 2>/dev/null; then
  echo "SKIP: python3 cannot import torch and numpy (tools/train needs them)"
  exit 0
fi
[[ -d $MODELS/qwen3 ]] || { echo "SKIP: no fixtures in $MODELS"; exit 0; }
FAILED=0
check() {  # n-targets args...: every target must PASS, with one line per tap and the final state
  local n=$1
  shift
  local out rc
  out=$(python3 "$ROOT/tools/train/check_target_forward.py" --dspark "$DSPARK" "$@" 2>&1)
  rc=$?
  local passes rows
  passes=$(grep -c "^PASS" <<< "$out")
  rows=$(grep -c "rel RMS .*max abs" <<< "$out")
  if [[ $rc -eq 0 && $passes -eq $n && $rows -ge $((3 * n)) ]]; then
    grep -E "^(/|PASS)" <<< "$out" | paste - - | sed 's/^/ok   /'
  else
    echo "FAIL: rc $rc, $passes of $n targets passed, $rows rows"
    echo "$out"
    FAILED=1
  fi
}
# Each Llama-family variant, and layer 0 of the llama3 model as llama.cpp converts it (q/k rows
# permuted, F16 matrices, rope_freqs divisors).
check 6 --max-tokens 32 --model "$MODELS"/{qwen3,llama3,qwen2,mistral,qwen3_yarn} \
  "$ROOT/tests/data/gguf/tiny_llama.gguf"
GGUF=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f $GGUF ]]; then
  check 1 --model "$GGUF" --prompts 3 --max-tokens 8 --taps 1,14,29
else
  echo "SKIP: $GGUF absent (scripts/setup.sh fetches it)"
fi
exit $FAILED
