#!/usr/bin/env python3
"""Summarises a raw device timeline (bench_round --trace --trace-timeline CSV) per graph replay.

Picks the graph that launched the most kernels (or --graph ID), splits the timeline into that
graph's contiguous replays, keeps the replays of the most common length (the same node sequence)
and prints, per node position, the median duration, the median gap from the previous node's end
(negative: it started before that node ended, a programmatic launch) and the median time from the
previous node's start; then the same summed per kernel name, largest share of the replay first.

    python3 bench/timeline_summary.py timeline.csv [--graph ID] [--positions N]
"""
import argparse
import collections
import csv
import re
import statistics
import sys

LENGTH = re.compile(r"\d+")


def short(name):
    """The kernel's own name: the last length-prefixed identifier of a mangled name that ends in
    "kernel" (e.g. gemv_m1_kernel), or the name itself (nvjet_..., memcpy), cut to 48."""
    found = None
    for m in LENGTH.finditer(name):  # a hash's digits may run into the length: try each suffix
        digits, j = m.group(), m.end()
        for k in range(len(digits)):
            n = int(digits[k:])
            ident = name[j:j + n]
            if n and len(ident) == n and ident.endswith("kernel") and ident.isidentifier():
                found = ident
                break
    return found or name[:48]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--graph", help="graph id (default: the one with the most kernels)")
    ap.add_argument("--positions", type=int, default=0,
                    help="print the first N node positions (default: all)")
    a = ap.parse_args()
    with open(a.csv, newline="") as f:
        spans = [r for r in csv.DictReader(f) if r["kind"] != "sync"]
    if not spans:
        sys.exit(f"{a.csv}: no device spans")
    for r in spans:
        r["s"], r["e"] = int(r["start_ns"]), int(r["end_ns"])
    spans.sort(key=lambda r: r["s"])
    counts = collections.Counter(r["graph_id"] for r in spans if r["graph_id"] != "0")
    if not counts:
        sys.exit(f"{a.csv}: no graph launched a kernel")
    graph = a.graph or counts.most_common(1)[0][0]
    replays, cur = [], []
    for r in spans:
        if r["graph_id"] == graph:
            cur.append(r)
        elif cur:
            replays.append(cur)
            cur = []
    if cur:
        replays.append(cur)
    if not replays:
        sys.exit(f"{a.csv}: graph {graph} launched nothing")
    length = collections.Counter(len(x) for x in replays).most_common(1)[0][0]
    full = [x for x in replays if len(x) == length]
    med = statistics.median
    span_us = med([(x[-1]["e"] - x[0]["s"]) / 1e3 for x in full])
    print(f"graph {graph}: {len(full)} replays of {length} nodes (of {len(replays)} replays), "
          f"median span {span_us:.1f} us")
    rows, by_name = [], collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for i in range(length):
        name = short(full[0][i]["name"])
        dur = med([(x[i]["e"] - x[i]["s"]) / 1e3 for x in full])
        gap = med([(x[i]["s"] - x[i - 1]["e"]) / 1e3 for x in full]) if i else 0.0
        s2s = med([(x[i]["s"] - x[i - 1]["s"]) / 1e3 for x in full]) if i else 0.0
        rows.append((i, name, dur, gap, s2s))
        agg = by_name[name]
        agg[0] += 1
        agg[1] += dur
        agg[2] += max(gap, 0.0)
        agg[3] += s2s
    shown = rows[: a.positions] if a.positions else rows
    print(f"{'pos':>4} {'node':<48} {'dur us':>8} {'gap us':>7} {'from prev start':>15}")
    for i, name, dur, gap, s2s in shown:
        print(f"{i:>4} {name:<48} {dur:>8.2f} {gap:>7.2f} {s2s:>15.2f}")
    print(f"\n{'node':<48} {'n':>4} {'dur us':>9} {'gaps us':>8} {'next starts after, us':>21}")
    # "next starts after": the time from this node's start to the next node's start, summed: the
    # node's share of the replay's critical path (the last node's own duration for the last).
    share = collections.defaultdict(float)
    for i, (_, name, dur, _, _) in enumerate(rows):
        share[name] += rows[i + 1][4] if i + 1 < len(rows) else dur
    for name, agg in sorted(by_name.items(), key=lambda kv: -share[kv[0]]):
        print(f"{name:<48} {agg[0]:>4} {agg[1]:>9.1f} {agg[2]:>8.1f} {share[name]:>21.1f}")


if __name__ == "__main__":
    main()
