#!/usr/bin/env python3
"""One table of `dspark eval --json` results (tools/eval/ablations.sh): per prompt set and setting,
tau, acceptance at draft positions 1-7, mean drafted tokens per round, speedup over plain
decoding, prompts slower than plain, and outputs identical to plain decoding.

    python3 tools/eval/ablation_table.py SET:CONFIG:FILE.json ... [--json OUT.json]

Prints a Markdown table; --json also writes the rows.
"""
import argparse
import json
import sys

from eval_runs import load_runs


def row(set_name: str, config: str, d: dict) -> dict:
    o = d["overall"]
    rounds = max(o["rounds"], 1)
    return {
        "set": set_name,
        "config": config,
        "gamma": d["gamma"],
        "markov": d.get("markov", True),
        "thresholds": d.get("thresholds", True),
        "draft_vocab": bool(d.get("draft_vocab")),
        "turns": o["turns"],
        "tau": o["tau"],
        "acceptance_by_position": o["acceptance_by_position"],
        "drafted_per_round": o["drafted"] / rounds,
        "speedup": o["speedup"],
        "slower_than_plain": o["slower_than_plain"],
        "identical": o["identical"],
        "plain_tok_per_s": o["plain_tok_per_s"],
        "spec_tok_per_s": o["spec_tok_per_s"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="SET:CONFIG:FILE.json (dspark eval --json)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    rows = [row(*r) for r in load_runs(args.results, "SET:CONFIG:FILE", "ablation_table")]
    positions = max(len(r["acceptance_by_position"]) for r in rows)
    head = ["set", "setting", "γ", "τ"] + [f"acc@{k + 1}" for k in range(positions)]
    head += ["drafted/round", "speedup", "slower", "identical"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        acc = r["acceptance_by_position"]
        cells = [r["set"], r["config"], str(r["gamma"]), f"{r['tau']:.3f}"]
        cells += [f"{acc[k]:.3f}" if k < len(acc) else "" for k in range(positions)]
        cells += [f"{r['drafted_per_round']:.2f}", f"{r['speedup']:.3f}×",
                  f"{r['slower_than_plain']}/{r['turns']}", f"{r['identical']}/{r['turns']}"]
        print("| " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
