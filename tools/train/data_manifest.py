#!/usr/bin/env python3
"""The data manifest of a training run: every prompt file it used (sha256, lines, prompts per
source family and per source), the seeds and the git commit, so that a run can be checked and
repeated (pipeline.sh writes $OUT/data_manifest.json).

    python3 tools/train/data_manifest.py --out M.json --seed train=0 --seed prompts=20260529 \
        FILE...
"""
import argparse
import hashlib
import json
import subprocess
import sys


def describe(path: str) -> dict:
    h = hashlib.sha256()
    sources, families, lines, multi = {}, {}, 0, 0
    with open(path, "rb") as f:
        for raw in f:
            h.update(raw)
            if not raw.strip():
                continue
            lines += 1
            j = json.loads(raw)
            src = j.get("source", "")
            sources[src] = sources.get(src, 0) + 1
            fam = src.split(":", 1)[0]
            families[fam] = families.get(fam, 0) + 1
            multi += "messages" in j
    return {"path": path, "sha256": h.hexdigest(), "prompts": lines, "multi_turn": multi,
            "by_family": dict(sorted(families.items())), "by_source": dict(sorted(sources.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", action="append", default=[], help="NAME=VALUE (repeatable)")
    ap.add_argument("--info", action="append", default=[],
                    help="a JSON file to include under its name (e.g. train_large_info.json)")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip() != ""
    seeds = dict(s.split("=", 1) for s in args.seed)
    info = {}
    for path in args.info:
        try:
            with open(path, encoding="utf-8") as f:
                info[path.rsplit("/", 1)[-1]] = json.load(f)
        except FileNotFoundError:
            pass
    manifest = {"git_commit": commit.strip(), "working_tree_modified": dirty, "seeds": seeds,
                "files": [describe(p) for p in args.files], "info": info}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{args.out}: {sum(x['prompts'] for x in manifest['files'])} prompts in "
          f"{len(args.files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
