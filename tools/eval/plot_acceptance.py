#!/usr/bin/env python3
"""Acceptance by draft position per category, from `dspark eval --json` output, as a PNG.

One line per category (and "overall", dashed): the share of rounds whose draft j was accepted,
j = 1..gamma; the legend gives each category's tau. Several JSON files (e.g. the chat set and
HumanEval) go into one figure.

    python3 tools/eval/plot_acceptance.py build/eval/chat.json [more.json ...] -o chat.png
"""
import argparse
import json
import sys


def series(doc: dict) -> list:
    """(label, tau, acceptance by position) per category, then overall."""
    out = [(name, g["tau"], g["acceptance_by_position"])
           for name, g in sorted(doc["categories"].items())]
    out.append(("overall", doc["overall"]["tau"], doc["overall"]["acceptance_by_position"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", help="dspark eval --json files")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title (default: the model and drafter)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed: pip install matplotlib==3.11.2 "
                 "(tools/eval/run_eval.sh sets up build/evalenv)")

    docs = []
    for path in args.json:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if "categories" not in doc or "overall" not in doc:
            sys.exit(f"error: {path} is not a dspark eval --json result")
        docs.append(doc)

    fig, ax = plt.subplots(figsize=(8, 5))
    for doc in docs:
        many = len(docs) > 1
        for name, tau, acc in series(doc):
            if name == "overall" and many:
                name = f"overall ({doc['prompts_file'].rsplit('/', 1)[-1]})"
            style = "--" if name.startswith("overall") else "-"
            ax.plot(range(1, len(acc) + 1), acc, style, marker="o", markersize=3,
                    label=f"{name} (tau {tau:.2f})")
    first = docs[0]
    ax.set_xlabel("draft position")
    ax.set_ylabel("rounds with this draft accepted")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(1, int(first["gamma"]) + 1))
    ax.grid(alpha=0.3)
    title = args.title or (f"{first['model'].rsplit('/', 1)[-1]} + "
                           f"{first['draft'].rstrip('/').rsplit('/', 1)[-1]}, "
                           f"greedy, gamma {first['gamma']}, {first['device']}")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"{args.out}: {sum(len(d['categories']) for d in docs)} categories")


if __name__ == "__main__":
    main()
