#!/usr/bin/env python3
"""Writes a draft vocabulary for `dspark ... --draft-vocab FILE`: the N most frequent token ids of
the target's own outputs (regen shards: the response tokens, loss_mask = 1; with
--include-prompts the prompt tokens too) and/or of texts
tokenized with the target's tokenizer.json. A DSpark / DFlash drafter then drafts greedy rounds
over these ids only: its LM head and Markov w2 shrink to N rows (output is unchanged; tokens
outside the list are never drafted). EAGLE-3 ships a 32k draft vocabulary chosen the same way.

  python3 tools/train/make_draft_vocab.py --size 32768 --regen runs/regen_train \\
      [--jsonl data.jsonl --tokenizer tokenizer.json --field response] [--always 2,0] \\
      --out models/MY-DRAFTER/draft_vocab.json

The file lists the ids by decreasing frequency (ties: smaller id first) with the share of the
counted tokens they cover; dspark reads it sorted (spec/dspark/draft_vocab.h).
Needs numpy (and `tokenizers` for --jsonl); reads safetensors itself (no torch)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import struct
import sys

import numpy as np

_NP = {"I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.uint8}


def read_tensors(path: str, names: set) -> dict:
    """The named integer tensors of one safetensors file, as numpy arrays."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name in names:
        e = header.get(name)
        if e is None:
            raise ValueError(f"{path}: no tensor '{name}'")
        if e["dtype"] not in _NP:
            raise ValueError(f"{path}: '{name}' has dtype {e['dtype']}, expected an integer type")
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[b:end].tobytes(), dtype=_NP[e["dtype"]]).reshape(e["shape"])
    return out


def count_regen(dirs: list, counts: np.ndarray, prompts: bool) -> int:
    total = 0
    for d in dirs:
        shards = sorted(glob.glob(os.path.join(d, "shard_*.safetensors")))
        if not shards:
            raise ValueError(f"{d}: no shard_*.safetensors (a `dspark regen` output directory?)")
        for path in shards:
            t = read_tensors(path, {"tokens", "loss_mask"})
            tokens = t["tokens"].astype(np.int64).ravel()
            keep = t["loss_mask"].astype(bool).ravel() | prompts
            sel = tokens[keep]
            if sel.size and (sel.min() < 0 or sel.max() >= counts.size):
                raise ValueError(f"{path}: token ids outside [0, {counts.size})")
            np.add.at(counts, sel, 1)
            total += int(sel.size)
            kind = "prompt + response" if prompts else "response"
            print(f"{path}: {sel.size} {kind} tokens", file=sys.stderr)
    return total


def count_jsonl(path: str, tokenizer_path: str, field: str, counts: np.ndarray) -> int:
    from tokenizers import Tokenizer  # only needed here

    tok = Tokenizer.from_file(tokenizer_path)
    total = 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if field not in obj:
                raise ValueError(f"{path}:{line_no}: no field '{field}'")
            ids = np.asarray(tok.encode(obj[field], add_special_tokens=False).ids, dtype=np.int64)
            ids = ids[(ids >= 0) & (ids < counts.size)]
            np.add.at(counts, ids, 1)
            total += int(ids.size)
    print(f"{path}: {total} tokens of '{field}'", file=sys.stderr)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, required=True, help="ids to keep (e.g. 32768)")
    ap.add_argument("--vocab-size", type=int, help="the target's vocabulary (default: from the "
                    "regen meta.json)")
    ap.add_argument("--regen", nargs="*", default=[], help="dspark regen output directories")
    ap.add_argument("--include-prompts", action="store_true",
                    help="also count the prompt tokens of the regen shards (drafts often copy them)")
    ap.add_argument("--jsonl", help="a JSONL corpus to tokenize")
    ap.add_argument("--tokenizer", help="tokenizer.json for --jsonl")
    ap.add_argument("--field", default="response", help="the JSONL field holding text")
    ap.add_argument("--always", default="", help="comma-separated ids always kept (e.g. EOS)")
    ap.add_argument("--out", required=True, help="the JSON file to write")
    a = ap.parse_args()

    vocab = a.vocab_size
    if vocab is None and a.regen:
        with open(os.path.join(a.regen[0], "meta.json"), encoding="utf-8") as f:
            vocab = int(json.load(f)["vocab_size"])
    if vocab is None:
        ap.error("--vocab-size is required without --regen")
    if a.size <= 0 or a.size > vocab:
        ap.error(f"--size must be in [1, {vocab}]")
    if not a.regen and not a.jsonl:
        ap.error("nothing to count: give --regen and/or --jsonl")
    if a.jsonl and not a.tokenizer:
        ap.error("--jsonl needs --tokenizer")

    counts = np.zeros(vocab, dtype=np.int64)
    total = count_regen(a.regen, counts, a.include_prompts)
    if a.jsonl:
        total += count_jsonl(a.jsonl, a.tokenizer, a.field, counts)
    if total == 0:
        print("no tokens counted", file=sys.stderr)
        return 1
    always = [int(x) for x in a.always.split(",") if x.strip()]
    for t in always:
        if not 0 <= t < vocab:
            ap.error(f"--always id {t} is outside [0, {vocab})")
    # Decreasing count, then increasing id (a stable sort of ids by -count).
    order = np.argsort(-counts, kind="stable")
    chosen = list(dict.fromkeys(always + [int(i) for i in order]))[: a.size]
    covered = int(counts[chosen].sum())
    out = {"token_ids": chosen, "size": len(chosen), "vocab_size": vocab,
           "counted_tokens": total, "distinct_counted": int((counts > 0).sum()),
           "coverage": covered / total,
           "sources": {"regen": a.regen, "jsonl": a.jsonl}}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"{a.out}: {len(chosen)} of {vocab} ids cover {100 * covered / total:.2f}% of "
          f"{total} counted tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
