#!/usr/bin/env python3
"""One table of `dspark eval --json` runs at several batch sizes (tools/eval/greedy_equality.sh):
per source and batch size, the turns whose speculative output equals plain decoding's in the same
batch, the turns whose plain output equals that of the smallest batch size of any source
(per-turn output_hash), tau and the decode speedup.

    python3 tools/eval/equality_table.py SOURCE:BATCH:FILE.json ... [--json OUT.json]

Exits 1 when a run lacks output hashes (an older dspark) or covers other turns than the others.
"""
import argparse
import json
import sys

from eval_runs import load_runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="SOURCE:BATCH:FILE.json (dspark eval --json)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    runs = []
    for source, batch, d in load_runs(args.results, "SOURCE:BATCH:FILE", "equality_table"):
        hashes = {(t["id"], t["turn"]): t.get("output_hash") for t in d["turns"]}
        if None in hashes.values():
            print(f"equality_table: {source} batch {batch} has no output_hash per turn",
                  file=sys.stderr)
            return 1
        runs.append((source, int(batch), d, hashes))
    # The reference outputs: plain decoding at the smallest batch size measured.
    ref = min(runs, key=lambda r: r[1])
    for source, batch, _, hashes in runs:
        if hashes.keys() != ref[3].keys():
            print(f"equality_table: {source} batch {batch} covers other turns", file=sys.stderr)
            return 1
    rows = []
    print(f"| source | batch | turns | speculative = plain | plain = plain at batch {ref[1]} "
          "| τ | speedup |")
    print("|---|---|---|---|---|---|---|")
    for source, batch, d, hashes in runs:
        o = d["overall"]
        same = sum(hashes[k] == ref[3][k] for k in hashes)
        rows.append({"source": source, "batch": batch, "turns": o["turns"],
                     "identical": o["identical"], "plain_equal_reference": same,
                     "reference_batch": ref[1], "tau": o["tau"], "speedup": o["speedup"],
                     "device": d["device"], "dtype": d["dtype"]})
        print(f"| {source} | {batch} | {o['turns']} | {o['identical']}/{o['turns']} "
              f"| {same}/{len(hashes)} | {o['tau']:.3f} | {o['speedup']:.3f}× |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
