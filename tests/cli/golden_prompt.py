"""Prints golden prompt 1 of a fixture model as JSON (for the tests/cli scripts): its text, the
transformers greedy continuation and the prompt's token count, from goldens.safetensors.

    python3 tests/cli/golden_prompt.py MODEL_DIR > golden.json
"""
import json
import sys

from safetensors import safe_open
from safetensors.numpy import load_file

m = sys.argv[1]
g = load_file(f"{m}/goldens.safetensors")
with safe_open(f"{m}/goldens.safetensors", "np") as f:
    prompts = json.loads(f.metadata()["prompts"])
print(json.dumps({"prompt": prompts[1], "greedy": g["p1.greedy"].tolist(),
                  "n_prompt": int(g["p1.tokens"].shape[0])}))
