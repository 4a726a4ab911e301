"""Reads `dspark eval --json` results named on a command line as LABEL:LABEL:FILE.json (the
argument form of ablation_table.py and equality_table.py)."""
import json
import sys


def load_runs(specs: list, form: str, tool: str) -> list:
    """[(label1, label2, result)] for specs like "chat:base:chat-base.json"; exits 2 naming `form`
    (e.g. "SET:CONFIG:FILE") on a malformed spec."""
    runs = []
    for spec in specs:
        parts = spec.split(":", 2)
        if len(parts) != 3:
            print(f"{tool}: '{spec}' is not {form}", file=sys.stderr)
            sys.exit(2)
        with open(parts[2]) as f:
            runs.append((parts[0], parts[1], json.load(f)))
    return runs
