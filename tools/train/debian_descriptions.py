#!/usr/bin/env python3
"""Builds tools/train/data/debian_descriptions.jsonl.xz: English descriptions of Debian packages,
a training source of broad_sources.py (what software does, who uses it, its features).

Source: Debian 12 (bookworm) `main`, the package index's English descriptions (Translation-en),
which apt downloads with

    apt-get update -o Acquire::Languages=en

Every package in `main` is free software under the Debian Free Software Guidelines; its
description is part of its packaging (debian/control), distributed with the package and by every
Debian mirror. Kept: one package per distinct description (Description-md5), sections other than
libraries, debug symbols, transitional packages and localisation, long descriptions of
--min-chars..--max-chars characters, then a seeded sample of --n. Deterministic for one index.

    python3 tools/train/debian_descriptions.py [--lists /var/lib/apt/lists] [--n 6000]
"""
import argparse
import glob
import json
import lzma
import os
import random
import subprocess
import sys

SKIP_SECTIONS = {"libs", "libdevel", "oldlibs", "debug", "localization", "metapackages",
                 "kernel", "fonts"}
SKIP_WORDS = ("transitional", "dummy package", "debug symbols", "documentation for",
              "development files", "(data files)", "shared library")


def read_index(path: str) -> str:
    """Text of an apt list file (lz4 / xz / gz / plain, as apt stored it)."""
    return subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True,
                          capture_output=True, text=True).stdout


def stanzas(text: str):
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if line.startswith(" ") and key:
                fields[key] += "\n" + line[1:]
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if fields:
            yield fields


def long_text(description: str) -> tuple:
    """(short description, long description as paragraphs) of a Description-en field."""
    short, _, body = description.partition("\n")
    paras, cur = [], []
    for line in body.split("\n"):
        if line.strip() == ".":
            paras.append(" ".join(cur))
            cur = []
        else:
            cur.append(line.strip())
    paras.append(" ".join(cur))
    return short.strip(), "\n\n".join(p for p in paras if p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lists", default="/var/lib/apt/lists")
    ap.add_argument("--suite", default="bookworm")
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--min-chars", type=int, default=200)
    ap.add_argument("--max-chars", type=int, default=900)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "data",
                                                  "debian_descriptions.jsonl.xz"))
    args = ap.parse_args()
    pattern = os.path.join(args.lists, f"*_dists_{args.suite}_main_")
    trans = glob.glob(pattern + "i18n_Translation-en*")
    packages = glob.glob(pattern + "binary-amd64_Packages*")
    if not trans or not packages:
        sys.exit(f"error: no {args.suite} main Translation-en / Packages in {args.lists}: run "
                 "apt-get update -o Acquire::Languages=en")
    section = {}
    for st in stanzas(read_index(packages[0])):
        section[st.get("Package", "")] = st.get("Section", "")
    seen, rows = set(), []
    for st in stanzas(read_index(trans[0])):
        name, md5, desc = st.get("Package"), st.get("Description-md5"), st.get("Description-en")
        if not name or not desc or md5 in seen:
            continue
        sec = section.get(name, "").split("/")[-1]
        short, body = long_text(desc)
        low = (short + " " + body).lower()
        if sec in SKIP_SECTIONS or not sec or any(w in low for w in SKIP_WORDS):
            continue
        if not args.min_chars <= len(body) <= args.max_chars or not body.isascii():
            continue
        seen.add(md5)
        rows.append({"package": name, "section": sec, "short": short, "description": body})
    rows.sort(key=lambda r: r["package"])
    random.Random(args.seed).shuffle(rows)
    rows = sorted(rows[: args.n], key=lambda r: r["package"])
    with lzma.open(args.out, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(json.dumps({"out": args.out, "descriptions": len(rows), "candidates": len(seen),
                      "suite": args.suite, "seed": args.seed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
