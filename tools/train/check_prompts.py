#!/usr/bin/env python3
"""Checks a prompt set written by `make_prompts.py --extend` against the committed held-out sets:

  * it starts with the committed train.jsonl (same prompts and sources, in order);
  * its prompts are distinct and none equals a prompt of test.jsonl or calib.jsonl;
  * no new prompt of a prose kind (template:explain / compare / advice / write and the kinds of
    prose_lists.py) contains a held-out item: an entry of the self-authored lists
    (make_prompts.py's CONCEPTS / PAIRS / ACTIVITIES / TOPICS and every list of prose_lists.py)
    that occurs as a whole phrase, ignoring case, in a held-out templated prompt (a pair: both
    sides in one prompt; then each side counts as an item). Found here with its own code, not
    make_prompts.py's;
  * no entry of prose_lists.py repeats an entry of make_prompts.py's lists;
  * optionally (--min-prose / --max-prose) the share of the new prompts from the prose pool, per
    the _info.json next to the file;
  * optionally (--fresh DIR, a directory written by `make_prompts.py --out DIR` without --extend)
    the committed files are what make_prompts.py writes: test.jsonl, calib.jsonl and
    prompts_info.json byte for byte, train.jsonl byte for byte once the object addresses that
    some stdlib signatures print (" at 0x7f..."; they differ from run to run) are taken out.

Prints one line per check and the counts per source; exit status 1 when a check fails.

    python3 tools/train/check_prompts.py --data tools/train/data --extended /tmp/ext.jsonl \
        [--fresh /tmp/x] [--min-prose 0.2 --max-prose 0.25]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_prompts as M  # noqa: E402  (the lists only)
import prose_lists as P  # noqa: E402

OLD_PROSE_KINDS = {"explain", "compare", "advice", "write"}


def read(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def all_entries() -> list:
    """Every entry (a string, or a pair as a tuple) of the self-authored prose lists."""
    out = list(M.CONCEPTS) + list(M.PAIRS) + list(M.ACTIVITIES) + list(M.TOPICS)
    for name in dir(P):
        value = getattr(P, name)
        if name.isupper() and not name.endswith("TEMPLATES") and isinstance(value, list):
            if name == "EMAIL_GROUPS":
                out += [x for rs, ms in value for x in rs + ms]
            else:
                out += value
    return out


def occurs(phrase: str, text: str) -> bool:
    phrase, text = phrase.strip().lower(), text.lower()
    start = text.find(phrase)
    while start >= 0:
        end = start + len(phrase)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(phrase, start + 1)
    return False


def held_out_items(held_templated: list) -> list:
    items = []
    for e in all_entries():
        sides = list(e) if isinstance(e, tuple) else [e]
        if any(all(occurs(s, p) for s in sides) for p in held_templated):
            items += [s.strip() for s in sides]
    return sorted(set(items))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the committed sets (tools/train/data)")
    ap.add_argument("--extended", required=True, help="make_prompts.py --extend's output")
    ap.add_argument("--fresh", default="", help="a make_prompts.py --out directory to compare")
    ap.add_argument("--min-prose", type=float, default=None)
    ap.add_argument("--max-prose", type=float, default=None)
    args = ap.parse_args()
    failed = []

    def check(ok: bool, what: str, detail: str = "") -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}")
        if not ok:
            failed.append(what)

    if args.fresh:
        strip = re.compile(rb" at 0x[0-9a-f]+")
        for name in ("test.jsonl", "calib.jsonl", "prompts_info.json", "train.jsonl"):
            with open(os.path.join(args.data, name), "rb") as f:
                a = f.read()
            with open(os.path.join(args.fresh, name), "rb") as f:
                b = f.read()
            if name == "train.jsonl":
                a, b = strip.sub(b"", a), strip.sub(b"", b)
            check(a == b, f"committed {name} is what make_prompts.py writes",
                  "" if a == b else f"{args.fresh}/{name} differs")

    base = read(os.path.join(args.data, "train.jsonl"))
    held_rows = read(os.path.join(args.data, "test.jsonl")) + \
        read(os.path.join(args.data, "calib.jsonl"))
    rows = read(args.extended)
    head = [(r["prompt"], r["source"]) for r in rows[:len(base)]]
    check(head == [(r["prompt"], r["source"]) for r in base],
          f"starts with the committed train.jsonl ({len(base)} prompts)")
    new = rows[len(base):]
    prompts = [r["prompt"] for r in rows]
    dup = len(prompts) - len(set(prompts))
    check(dup == 0, f"{len(prompts)} prompts, all distinct", f"{dup} repeated" if dup else "")
    held = {r["prompt"] for r in held_rows}
    hits = [p for p in prompts if p in held]
    check(not hits, "no prompt equals a held-out prompt",
          f"{len(hits)}, e.g. {hits[0][:80]!r}" if hits else "")

    held_templated = [r["prompt"] for r in held_rows if r["source"].startswith("template:")]
    items = held_out_items(held_templated)
    prose_kinds = OLD_PROSE_KINDS | {k for k in M.PROSE_WEIGHTS}
    prose_rows = [r for r in new if r["source"].startswith("template:")
                  and r["source"].split(":", 1)[1] in prose_kinds]
    leaks = [(r["prompt"], i) for r in prose_rows for i in items if occurs(i, r["prompt"])]
    check(not leaks, f"no new prose prompt ({len(prose_rows)}) uses one of the {len(items)} "
          f"held-out items ({len(held_templated)} held-out templated prompts)",
          f"{len(leaks)}, e.g. {leaks[0][1]!r} in {leaks[0][0][:80]!r}" if leaks else "")

    def norm(e):
        return frozenset(s.strip().lower() for s in e) if isinstance(e, tuple) else \
            e.strip().lower()
    old = {norm(e) for e in list(M.CONCEPTS) + list(M.PAIRS) + list(M.ACTIVITIES) +
           list(M.TOPICS)}
    new_entries = all_entries()[len(M.CONCEPTS) + len(M.PAIRS) + len(M.ACTIVITIES) +
                                len(M.TOPICS):]
    same = [e for e in new_entries if norm(e) in old]
    check(not same, f"no entry of prose_lists.py ({len(new_entries)}) repeats one of "
          "make_prompts.py's lists", f"{same[:3]}" if same else "")

    by_source = collections.Counter(r["source"] if r["source"].startswith("template:")
                                    else r["source"].split(":")[0] for r in new)
    print("new prompts by source:", json.dumps(dict(sorted(by_source.items()))))
    info_file = os.path.splitext(args.extended)[0] + "_info.json"
    if args.min_prose is not None or args.max_prose is not None:
        with open(info_file, encoding="utf-8") as f:
            info = json.load(f)
        share = info["new"]["prose"] / max(1, len(new))
        lo = args.min_prose if args.min_prose is not None else 0.0
        hi = args.max_prose if args.max_prose is not None else 1.0
        check(lo <= share <= hi, f"prose pool share of the new prompts {share:.3f} in "
              f"[{lo}, {hi}] ({info['new']['prose']} of {len(new)}; "
              f"{info['available']['prose']} available)")
    print("FAILED: " + "; ".join(failed) if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
