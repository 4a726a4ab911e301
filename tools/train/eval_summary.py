#!/usr/bin/env python3
"""Collects the held-out evaluation of the training pipeline into one metrics JSON and a table.

Every run under --eval is a `dspark regen` output directory (meta.json with the speculative
telemetry, responses.jsonl with the response tokens). `plain` (no draft) is the reference: a
speculative run is lossless when every response equals the plain one token for token. With
--prompts (the prompt file, JSON lines with "id" and "source"), each speculative run's tau by prompt
source family (template, stdlib, code, pydoc) and template kind, from the per-sequence rounds and
accepted drafts of responses.jsonl (tau = (accepted + rounds) / rounds, the engine's definition);
with --sim, train.py --eval-only's simulated tau of the same drafter (eval_metrics.json) next to it.

    python3 tools/train/eval_summary.py --eval OUT/eval --drafter OUT/drafter --out metrics.json \
        [--prompts tools/train/data/test.jsonl] [--sim OUT/eval_sim/eval_metrics.json]
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
    responses, spec = {}, {}
    with open(os.path.join(d, "responses.jsonl"), encoding="utf-8") as f:
        for line in f:
            j = json.loads(line)
            responses[j["id"]] = j["response_tokens"]
            if "spec" in j:
                spec[j["id"]] = (j["spec"]["rounds"], j["spec"]["accepted"])
    return {"meta": meta, "responses": responses, "spec": spec}


def read_sources(path: str) -> dict:
    """{prompt id: source} of a prompt file (an id-less line is its line number, as in regen)."""
    out, n = {}, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            j = json.loads(line)
            pid = j.get("id", n)
            n += 1
            if isinstance(j.get("source"), str):
                out[pid if isinstance(pid, str) else json.dumps(pid)] = j["source"]
    return out


def source_groups(source) -> list:
    """Source family (before ':'), plus the template kind for templated questions (as train.py)."""
    if not source:
        return ["unknown"]
    family = source.split(":", 1)[0]
    return [family, source] if family == "template" and source != family else [family]


def tau_by_source(spec: dict, sources: dict) -> dict:
    """{group: {sequences, tau, rounds}} from per-sequence (rounds, accepted)."""
    acc = {}
    for pid, (rounds, accepted) in spec.items():
        for g in source_groups(sources.get(pid)):
            a = acc.setdefault(g, [0, 0, 0])
            a[0] += 1
            a[1] += rounds
            a[2] += accepted
    order = sorted(acc, key=lambda g: (":" in g, -acc[g][0], g))
    return {g: {"sequences": acc[g][0], "tau": round((acc[g][1] + acc[g][2]) / max(1, acc[g][1]), 4),
                "rounds": acc[g][1]} for g in order}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--eval", required=True, help="directory of regen evaluation runs")
    ap.add_argument("--drafter", default=None, help="drafter dir (train_metrics.json, thresholds)")
    ap.add_argument("--steps", default=None, help="pipeline steps.json")
    ap.add_argument("--prompts", default=None, help="prompt file with sources: tau by source")
    ap.add_argument("--sim", default=None,
                    help="train.py --eval-only's eval_metrics.json (simulated tau, by source)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    runs = {}
    for name in sorted(os.listdir(args.eval)):
        r = load_run(os.path.join(args.eval, name))
        if r is not None:
            runs[name] = r
    plain = runs.get("plain")
    sources = read_sources(args.prompts) if args.prompts and os.path.exists(args.prompts) else {}
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
            if sources and r["spec"]:
                entry["tau_by_source"] = tau_by_source(r["spec"], sources)
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
                                                    "parity_rel_err", "init_from", "cumulative_steps",
                                                    "cumulative_train_seconds") if k in m}
            result["training"]["final_val"] = {
                k: m["final"][k] for k in ("tau_greedy", "tau_greedy_no_markov", "tau_analytic_uniform",
                                           "match_by_position", "tau_by_source") if k in m["final"]}
        th = os.path.join(args.drafter, "dspark_thresholds.json")
        if os.path.exists(th):
            with open(th, encoding="utf-8") as f:
                result["thresholds"] = json.load(f).get("thresholds")
        st = os.path.join(args.drafter, "model.safetensors")
        if os.path.exists(st):
            result["drafter_bytes"] = os.path.getsize(st)
    if args.sim and os.path.exists(args.sim):
        with open(args.sim, encoding="utf-8") as f:
            sim = json.load(f)
        ev = sim.get("eval", {})
        result["simulated"] = {"data": sim.get("data"), "tau_greedy": ev.get("tau_greedy"),
                               "tau_greedy_no_markov": ev.get("tau_greedy_no_markov"),
                               "tau_by_source": ev.get("tau_by_source")}
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
    by_run = {n: e["tau_by_source"] for n, e in result["runs"].items() if "tau_by_source" in e}
    sim_by = (result.get("simulated") or {}).get("tau_by_source") or {}
    if by_run:
        groups = list(next(iter(by_run.values())))
        cols = list(by_run) + (["simulated"] if sim_by else [])
        print(f"\ntau by prompt source (sequences){'; simulated: train.py --eval-only on the plain responses' if sim_by else ''}")
        print(f"{'source':18} {'n':>4} " + " ".join(f"{c[:14]:>14}" for c in cols))
        for g in groups:
            n = next(iter(by_run.values()))[g]["sequences"]
            vals = [by_run[c].get(g, {}).get("tau") for c in by_run]
            if sim_by:
                vals.append(sim_by.get(g, {}).get("tau_greedy"))
            print(f"{g:18} {n:>4} " + " ".join(f"{v:>14.3f}" if v is not None else f"{'-':>14}"
                                              for v in vals))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
