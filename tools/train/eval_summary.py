#!/usr/bin/env python3
"""Collects the held-out evaluation of the training pipeline into one metrics JSON and a table.

Every run under --eval is a `dspark regen` output directory (meta.json with the speculative
telemetry, responses.jsonl with the response tokens). `plain` (no draft) is the reference: a
speculative run is lossless when every response equals the plain one token for token.

    python3 tools/train/eval_summary.py --eval OUT/eval --drafter OUT/drafter --out metrics.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def load_run(d: str) -> dict | None:
    meta_file = os.path.join(d, "meta.json")
    if not os.path.exists(meta_file):
        return None
    with open(meta_file, encoding="utf-8") as f:
        meta = json.load(f)
    responses = {}
    with open(os.path.join(d, "responses.jsonl"), encoding="utf-8") as f:
        for line in f:
            j = json.loads(line)
            responses[j["id"]] = j["response_tokens"]
    return {"meta": meta, "responses": responses}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--eval", required=True, help="directory of regen evaluation runs")
    ap.add_argument("--drafter", default=None, help="drafter dir (train_metrics.json, thresholds)")
    ap.add_argument("--steps", default=None, help="pipeline steps.json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    runs = {}
    for name in sorted(os.listdir(args.eval)):
        r = load_run(os.path.join(args.eval, name))
        if r is not None:
            runs[name] = r
    plain = runs.get("plain")
    result = {"runs": {}}
    for name, r in runs.items():
        meta = r["meta"]
        spec = meta.get("spec", {})
        entry = {
            "prompts": meta["prompts"],
            "sequences": meta["sequences"],
            "response_tokens": meta["response_tokens"],
            "gamma": meta.get("gamma", 0),
            "generated_tok_per_s_batched": round(meta.get("generated_tok_per_s", 0.0), 1),
            "seconds": meta.get("seconds", {}),
        }
        if spec:
            entry["tau"] = spec.get("tau")
            entry["acceptance"] = spec.get("acceptance")
            for key in ("rounds", "drafted", "accepted", "acceptance_by_position",
                        "drafted_by_position", "accepted_by_position"):
                if key in spec:
                    entry[key] = spec[key]
        if plain is not None and name != "plain":
            same = sum(1 for k, v in r["responses"].items() if plain["responses"].get(k) == v)
            entry["identical_to_plain"] = same
            entry["compared"] = len(r["responses"])
            entry["lossless"] = same == len(r["responses"]) == len(plain["responses"])
        result["runs"][name] = entry
    if args.drafter:
        tm = os.path.join(args.drafter, "train_metrics.json")
        if os.path.exists(tm):
            with open(tm, encoding="utf-8") as f:
                m = json.load(f)
            result["training"] = {k: m[k] for k in ("params", "steps", "train_seconds", "data",
                                                    "parity_rel_err") if k in m}
            result["training"]["final_val"] = {
                k: m["final"][k] for k in ("tau_greedy", "tau_greedy_no_markov", "tau_analytic_uniform",
                                           "match_by_position")}
        th = os.path.join(args.drafter, "dspark_thresholds.json")
        if os.path.exists(th):
            with open(th, encoding="utf-8") as f:
                result["thresholds"] = json.load(f).get("thresholds")
        st = os.path.join(args.drafter, "model.safetensors")
        if os.path.exists(st):
            result["drafter_bytes"] = os.path.getsize(st)
    if args.steps and os.path.exists(args.steps):
        with open(args.steps, encoding="utf-8") as f:
            result["steps"] = json.load(f)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    print(f"{'run':18} {'tau':>7} {'accept':>7} {'identical':>10}  acceptance by position")
    for name, e in result["runs"].items():
        tau = f"{e['tau']:.3f}" if e.get("tau") is not None else "1"
        acc = f"{e['acceptance']:.3f}" if e.get("acceptance") is not None else "-"
        ident = f"{e['identical_to_plain']}/{e['compared']}" if "compared" in e else "-"
        print(f"{name:18} {tau:>7} {acc:>7} {ident:>10}  {[round(x, 3) for x in e.get('acceptance_by_position', [])]}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
