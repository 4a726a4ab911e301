#!/usr/bin/env python3
"""Aggregate tok/s against client concurrency, from `bench/serve_load.py --json` output, as a PNG.

One line per draft configuration run (repeated configurations keep their run number), the
concurrency axis in log scale; a second panel shows each run's tok/s over the mean of the runs
without a drafter at the same concurrency (a line at 0.98: within 2% of plain decoding).

    python3 bench/plot_serve_load.py out.json -o serve-load.png
"""
import argparse
import json
import os
import sys

from serve_load import config_name  # the same configuration names as serve_load's table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="serve_load.py --json output")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="figure title (default: the model and device)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed: pip install matplotlib==3.11.2")

    with open(args.json, encoding="utf-8") as f:
        doc = json.load(f)
    configs = doc["configs"]
    plain = [c for c in configs if c["draft"] == "none"]
    if not plain:
        sys.exit("error: no configuration without a drafter (--draft none) to compare with")
    base = {}
    for c in plain:
        for lv in c["levels"]:
            base.setdefault(lv["concurrency"], []).append(lv["tok_per_s"])
    base = {k: sum(v) / len(v) for k, v in base.items()}

    fig, (ax, rel) = plt.subplots(1, 2, figsize=(12, 4.5))
    seen = {}
    for c in configs:
        name = config_name(c["draft"])
        seen[name] = seen.get(name, 0) + 1
        tag = f"{name} (run {seen[name]})"
        xs = [lv["concurrency"] for lv in c["levels"]]
        ys = [lv["tok_per_s"] for lv in c["levels"]]
        style = "--" if c["draft"] == "none" else "-"
        ax.plot(xs, ys, style, marker="o", label=tag)
        rel.plot(xs, [y / base[x] for x, y in zip(xs, ys)], style, marker="o", label=tag)
    for a in (ax, rel):
        a.set_xscale("log", base=2)
        a.set_xlabel("concurrent clients")
        a.grid(True, alpha=0.3)
    ax.set_ylabel("aggregate tok/s")
    rel.set_ylabel("tok/s / mean of the runs without a drafter")
    rel.axhline(0.98, color="grey", linewidth=0.8)
    ax.legend(fontsize=7)
    fig.suptitle(args.title or f"{os.path.basename(doc['model'])} on {doc['device']}, "
                 f"{'chat' if doc.get('chat') else 'completions'}, {doc['max_tokens']} tokens")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
