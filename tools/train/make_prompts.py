#!/usr/bin/env python3
"""Builds the drafter training / held-out prompt sets from text that exists offline on every
machine, with licences that permit it:

  * docstrings of the Python standard library (the running interpreter's modules; PSF License
    Version 2, a permissive licence that allows copying and derived works), turned into
    instructions ("Explain what this function does", "Summarize", "Write an example", ...);
  * self-authored templated questions (arithmetic and word problems, programming tasks,
    explanations of concepts, comparisons, advice lists, rewriting) and, for --extend only, the
    open-ended prose prompts built from prose_lists.py: written for dspark, same licence as the
    repository.

Deterministic: one --seed drives every choice; the stdlib walk is sorted. Different Python versions
have slightly different docstrings, which is why the generated files are committed
(tools/train/data/) and the pipeline uses them as they are.

The split is by source item (a docstring or a template instance is never in both sets). Output:
JSON lines {"id": ..., "prompt": ..., "source": "stdlib:<module>" | "template:<kind>"}.

    python3 tools/train/make_prompts.py --out tools/train/data --train 6000 --test 128

--extend N writes a larger training set (--extend-out, default DIR/train_large.jsonl; not
committed: generate it where it is used) and leaves the committed files alone: the committed
train.jsonl first, then new prompts, never from a source item of DIR/test.jsonl or
DIR/calib.jsonl (a docstring quoted by a held-out prompt, the function it documents, a held-out
templated prompt), from

  * every stdlib docstring under each of its instruction templates (plus more templates);
  * the Python Language Reference help texts that `help()` shows (pydoc_data.topics, ~465 KB in
    3.11; part of the Python documentation, PSF License Version 2), cut into sections of
    <= --max-doc-chars characters, with instructions (explain, summarize, example, quiz, ...);
  * the source code of pure-Python stdlib functions (5-40 lines, docstring removed; PSF License
    Version 2) with instructions (explain, comment, test, review, translate);
  * more templated questions (none of the kinds explain / compare / advice / write that uses a
    held-out item, see below);
  * open-ended prose (self-authored, prose_lists.py): explanations of ~550 concepts, comparisons
    of ~180 pairs, advice on ~180 activities, poems / stories / descriptions of ~200 topics
    (make_prompts.py's lists and new ones, under many more phrasings than templated()), and kinds
    of their own: story (character x place x situation), howto (how an everyday thing works),
    dayinlife (a profession), email (recipient x matter), plan (step-by-step, for a goal),
    proscons (a choice), whatif (a hypothetical), dialogue (two characters x subject); sources
    "template:<kind>". No entry of any list is used that a held-out templated prompt uses (an
    entry occurring in one, a pair when both sides do), nor any entry containing one;

interleaved so that any prefix of the file mixes them: the prose pool takes --prose-fraction
(0.22) of the new prompts, a round robin over the other sources (each in its seeded shuffled
order) the rest. Deterministic for one --seed and one Python version (recorded in
train_large_info.json, as prompts_info.json records it, with the counts per source and template
kind, the prose prompts available and the held-out items excluded).

    python3 tools/train/make_prompts.py --out tools/train/data --extend 30000 \
        --extend-out /tmp/prompts/train_large.jsonl
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import pkgutil
import random
import re
import sys
import warnings

# Modules that print, open windows, start things, or are platform specific when imported.
SKIP_MODULES = {
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
    "ensurepip", "venv", "pydoc_data", "__main__", "__hello__", "__phello__", "_pydev",
    "xxsubtype", "xxlimited", "crypt", "nis", "spwd", "ossaudiodev", "msilib", "winreg",
    "winsound", "_msi", "_winapi", "msvcrt", "idle", "sre_compile", "sre_parse", "sre_constants",
}

DOC_TEMPLATES = [
    "Explain what the Python function `{name}` does, based on its documentation:\n\n{doc}",
    "Summarize the following Python documentation in two or three sentences:\n\n{doc}",
    "Here is the documentation of `{name}{sig}`:\n\n{doc}\n\nWrite a short example that uses it "
    "and explain the output.",
    "Rewrite this documentation in simpler words for a beginner:\n\n{doc}",
    "What are the parameters of `{name}{sig}` and what does it return? The documentation "
    "says:\n\n{doc}",
    "Read this documentation of `{name}` and list its key points as bullets:\n\n{doc}",
    "I found this in the Python documentation for `{name}`:\n\n{doc}\n\nWhen would I use it?",
]

CLASS_TEMPLATES = [
    "Explain what the Python class `{name}` is for, based on its documentation:\n\n{doc}",
    "Summarize the purpose of the class `{name}` described here:\n\n{doc}",
    "Write a short Python example that creates and uses `{name}`. Its documentation:\n\n{doc}",
]

MODULE_TEMPLATES = [
    "What is the Python module `{name}` used for? Its documentation begins:\n\n{doc}",
    "Give an overview of the `{name}` module from this documentation:\n\n{doc}",
]

# --extend only (new lists, so that the committed sets come out unchanged).
EXTRA_DOC_TEMPLATES = [
    "Write a unit test for `{name}` based on its documentation:\n\n{doc}",
    "What mistakes do people make when using `{name}`? Its documentation:\n\n{doc}",
    "Explain `{name}` to someone who knows JavaScript but not Python. Documentation:\n\n{doc}",
    "Give two practical use cases for `{name}`, described here:\n\n{doc}",
]

TOPIC_TEMPLATES = [
    "Explain this part of the Python language reference in simple terms:\n\n{doc}",
    "Summarize the following section of the Python documentation:\n\n{doc}",
    "Write a short code example that illustrates the rules described here:\n\n{doc}",
    "What are the key points of this Python language reference section?\n\n{doc}",
    "Write three quiz questions, with answers, about this text:\n\n{doc}",
]

CODE_TEMPLATES = [
    "Explain what this Python function does:\n\n```python\n{code}\n```",
    "Add a docstring and comments to this Python function:\n\n```python\n{code}\n```",
    "Write unit tests for this Python function:\n\n```python\n{code}\n```",
    "Review this Python code and suggest improvements:\n\n```python\n{code}\n```",
    "Rewrite this Python function in JavaScript:\n\n```python\n{code}\n```",
    "Explain this code line by line for a beginner:\n\n```python\n{code}\n```",
]

# ---- self-authored templated questions -----------------------------------------------------------

CONCEPTS = [
    "recursion", "a hash table", "binary search", "big-O notation", "a linked list", "a stack",
    "a queue", "garbage collection", "a compiler", "an interpreter", "a virtual machine",
    "version control", "unit testing", "a race condition", "a deadlock", "caching",
    "an API", "a database index", "SQL joins", "regular expressions", "Unicode", "floating point "
    "rounding errors", "public key cryptography", "a checksum", "compression", "TCP and UDP",
    "DNS", "HTTP status codes", "a REST API", "JSON", "CSV files", "object-oriented programming",
    "functional programming", "immutability", "a closure", "a generator", "an iterator",
    "a decorator", "type hints", "exceptions", "dependency injection", "a binary tree",
    "a heap", "sorting algorithms", "merge sort", "quicksort", "dynamic programming",
    "greedy algorithms", "graph traversal", "Dijkstra's algorithm", "a neural network",
    "gradient descent", "overfitting", "a confusion matrix", "photosynthesis", "the water cycle",
    "gravity", "inflation", "compound interest", "supply and demand", "the greenhouse effect",
    "plate tectonics", "vaccines", "DNA", "evolution by natural selection", "the speed of light",
    "electric current", "magnetism", "the seasons", "the phases of the Moon", "tides",
    "probability", "the Pythagorean theorem", "prime numbers", "fractions", "percentages",
    "the median and the mean", "standard deviation", "logarithms", "derivatives", "integrals",
    "matrices", "vectors", "the binary number system", "hexadecimal numbers", "bits and bytes",
    "a spreadsheet formula", "time zones", "leap years", "a budget", "a password manager",
    "two-factor authentication", "phishing", "backups", "the difference between RAM and disk",
    "a CPU cache", "multithreading", "asynchronous programming", "a memory leak",
]

PAIRS = [
    ("a list", "a tuple"), ("a process", "a thread"), ("TCP", "UDP"), ("RAM", "ROM"),
    ("a compiler", "an interpreter"), ("weather", "climate"), ("a virus", "a bacterium"),
    ("speed", "velocity"), ("mass", "weight"), ("an array", "a linked list"),
    ("SQL", "NoSQL databases"), ("git merge", "git rebase"), ("HTTP", "HTTPS"),
    ("a class", "an object"), ("a function", "a method"), ("mean", "median"),
    ("a stack", "a queue"), ("deep copy", "shallow copy"), ("== ", "is in Python"),
    ("a module", "a package"), ("latency", "bandwidth"), ("encryption", "hashing"),
    ("a library", "a framework"), ("an integer", "a float"), ("a tax", "a tariff"),
    ("a comet", "an asteroid"), ("a lake", "a sea"), ("an alligator", "a crocodile"),
]

TASKS = [
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "counts the vowels in a string", "finds the largest element of a list without using max",
    "removes duplicates from a list while keeping the order", "checks whether a string is a "
    "palindrome", "merges two sorted lists", "computes the factorial of n iteratively",
    "flattens a nested list", "counts word frequencies in a text", "converts Celsius to "
    "Fahrenheit", "returns the greatest common divisor of two integers", "transposes a matrix "
    "given as a list of lists", "checks whether two strings are anagrams", "computes the sum of "
    "the digits of an integer", "splits a list into chunks of size k", "returns the second "
    "largest number in a list", "capitalizes the first letter of every word", "validates a "
    "simple email address", "computes the running average of a list", "rotates a list by k "
    "positions", "finds all pairs in a list that sum to a target", "converts a Roman numeral to "
    "an integer", "converts an integer to binary without using bin", "counts the lines of a "
    "file", "parses a CSV line into fields", "returns the mode of a list", "implements binary "
    "search", "implements bubble sort", "checks whether brackets in a string are balanced",
    "generates all subsets of a list", "computes the dot product of two vectors",
    "returns the longest word in a sentence", "compresses a string with run-length encoding",
]

LANGS = ["Python", "JavaScript", "C", "Go", "Rust", "Java"]

ACTIVITIES = [
    "studying for an exam", "learning a new programming language", "writing clean code",
    "saving money", "staying focused while working from home", "giving a presentation",
    "writing a cover letter", "sleeping better", "starting to run", "learning to cook",
    "keeping a plant alive", "organizing a small event", "reading more books", "reviewing code",
    "debugging a program", "writing documentation", "taking notes in meetings",
    "learning to draw", "reducing screen time", "traveling on a budget", "preparing for a job "
    "interview", "keeping a journal", "learning a musical instrument", "managing a small team",
]

TOPICS = [
    "the ocean", "autumn", "a city at night", "friendship", "a robot learning to paint",
    "the first snow", "a lighthouse", "a cup of coffee", "mountains", "a lost key", "the Moon",
    "a quiet library", "a train journey", "a rainy afternoon", "a garden", "the stars",
]

ITEMS = ["apples", "notebooks", "pencils", "tickets", "books", "oranges", "cookies", "stamps"]


def templated(rng: random.Random, kind: str) -> str:
    if kind == "arith":
        a, b = rng.randint(12, 999), rng.randint(3, 99)
        op = rng.choice(["plus", "minus", "times"])
        return rng.choice([
            f"What is {a} {op} {b}? Show your work.",
            f"Compute {a} {op} {b} step by step.",
            f"Calculate {a} {op} {b} and explain how you got the answer.",
        ])
    if kind == "word":
        n, p, item = rng.randint(2, 40), rng.randint(1, 30), rng.choice(ITEMS)
        k = rng.randint(2, 9)
        return rng.choice([
            f"A shop sells {item} for ${p} each. How much do {n} {item} cost?",
            f"Tom has {n * k} {item} and shares them equally among {k} friends. How many does "
            "each friend get?",
            f"A train travels at {p * 10} km/h for {k} hours. How far does it go?",
            f"If {n} workers build a wall in {k} days, how long would {2 * n} workers take, "
            "assuming they work at the same rate?",
            f"A recipe needs {k} eggs for {n} people. How many eggs are needed for {n * 3} "
            "people?",
            f"What is {rng.choice([10, 15, 20, 25, 30, 40])}% of {rng.randint(20, 900)}?",
        ])
    if kind == "code":
        return rng.choice([
            "Write a {lang} function that {task}.",
            "Write a {lang} function that {task}, and explain how it works.",
            "Show me how to write a function in {lang} that {task}.",
            "Implement a function that {task} in {lang}, with a short test.",
        ]).format(lang=rng.choice(LANGS[:3] if rng.random() < 0.7 else LANGS), task=rng.choice(TASKS))
    if kind == "explain":
        c = rng.choice(CONCEPTS)
        return rng.choice([
            f"Explain {c} to a beginner.", f"What is {c}? Give a simple example.",
            f"Explain {c} in a few sentences.", f"Why is {c} important?",
            f"Describe {c} as if I were ten years old.",
        ])
    if kind == "compare":
        x, y = rng.choice(PAIRS)
        return rng.choice([
            f"What is the difference between {x} and {y}?",
            f"Compare {x} and {y}.", f"When should I use {x} instead of {y}?",
        ])
    if kind == "advice":
        a = rng.choice(ACTIVITIES)
        return rng.choice([
            f"Give me {rng.randint(3, 7)} tips for {a}.", f"How can I get better at {a}?",
            f"List some common mistakes people make when {a}.",
        ])
    if kind == "write":
        t = rng.choice(TOPICS)
        return rng.choice([
            f"Write a short poem about {t}.", f"Write a haiku about {t}.",
            f"Write a short story (about 100 words) about {t}.",
            f"Describe {t} in one paragraph.",
        ])
    raise ValueError(kind)


TEMPLATE_KINDS = ["arith", "word", "code", "explain", "compare", "advice", "write"]

# ---- stdlib docstrings ----------------------------------------------------------------------------


def clean_doc(doc: str, max_chars: int) -> str | None:
    doc = inspect.cleandoc(doc).strip()
    if len(doc) < 60 or len(doc.split()) < 10:
        return None
    if len(doc) > max_chars:  # cut at a paragraph or sentence boundary
        cut = doc.rfind("\n\n", 0, max_chars)
        if cut < max_chars // 2:
            cut = doc.rfind(". ", 0, max_chars) + 1
        if cut < max_chars // 3:
            cut = max_chars
        doc = doc[:cut].rstrip()
    return doc


def signature(obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    return sig if len(sig) < 120 else ""


def walk_stdlib():
    """(qualified module name, kind, qualified name, object) of every public stdlib module, class,
    method and function (sorted walk; one level of submodules of packages)."""
    names = sorted(
        n for n in sys.stdlib_module_names if not n.startswith("_") and n not in SKIP_MODULES
    )
    devnull = open(os.devnull, "w")
    for mod_name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                old = sys.stdout
                sys.stdout = devnull
                try:
                    mod = importlib.import_module(mod_name)
                finally:
                    sys.stdout = old
        except BaseException:  # noqa: BLE001 - some modules fail on import by design
            continue
        mods = [(mod_name, mod)]
        if hasattr(mod, "__path__"):  # one level of submodules of packages
            for info in sorted(pkgutil.iter_modules(mod.__path__), key=lambda i: i.name):
                full = f"{mod_name}.{info.name}"
                if info.name.startswith("_") or info.name in SKIP_MODULES or "test" in info.name:
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        mods.append((full, importlib.import_module(full)))
                except BaseException:  # noqa: BLE001
                    continue
        for qual, m in mods:
            yield qual, "module", qual, m
            for attr in sorted(vars(m)):
                if attr.startswith("_"):
                    continue
                obj = getattr(m, attr, None)
                if getattr(obj, "__module__", None) != m.__name__:
                    continue
                if inspect.isclass(obj):
                    yield qual, "class", f"{qual}.{attr}", obj
                    for meth in sorted(vars(obj)):
                        if not meth.startswith("_"):
                            f = getattr(obj, meth, None)
                            if inspect.isfunction(f) or inspect.ismethoddescriptor(f):
                                yield qual, "function", f"{qual}.{attr}.{meth}", f
                elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
                    yield qual, "function", f"{qual}.{attr}", obj
    devnull.close()


def stdlib_items(max_chars: int) -> list:
    """(source, kind, qualified name, signature, doc) for public stdlib objects with docs."""
    seen_docs = set()
    items = []
    for qual, kind, name, obj in walk_stdlib():
        d = clean_doc(getattr(obj, "__doc__", None) or "", max_chars)
        if not d or d in seen_docs:
            continue
        seen_docs.add(d)
        items.append((f"stdlib:{qual}", kind, name, "" if kind == "module" else signature(obj), d))
    return items


def doc_prompt(rng: random.Random, item) -> str:
    _, kind, name, sig, doc = item
    if kind == "module":
        t = rng.choice(MODULE_TEMPLATES)
    elif kind == "class":
        t = rng.choice(CLASS_TEMPLATES)
    else:
        t = rng.choice(DOC_TEMPLATES)
    return t.format(name=name, sig=sig, doc=doc)


# ---- --extend: a larger training set -------------------------------------------------------------


def topic_sections(max_chars: int) -> list:
    """(source, text) sections of the language reference help texts (pydoc_data.topics), cut at
    paragraph boundaries into pieces of <= max_chars characters (>= 200)."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        piece = ""
        for para in topics[name].strip().split("\n\n"):
            if piece and len(piece) + len(para) + 2 > max_chars:
                if len(piece) >= 200:
                    out.append((f"pydoc:{name}", piece))
                piece = ""
            if len(para) > max_chars:  # a long paragraph (grammar, table): its head only
                para = clean_doc(para, max_chars) or para[:max_chars]
            piece = f"{piece}\n\n{para}" if piece else para
        if len(piece) >= 200:
            out.append((f"pydoc:{name}", piece))
    return out


def strip_docstring(source: str) -> str | None:
    """The function's source without its docstring (None when it does not parse alone)."""
    import ast
    import textwrap

    src = textwrap.dedent(source)
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                             ast.Constant) \
            and isinstance(body[0].value.value, str):
        if len(body) == 1:
            return None  # nothing but a docstring
        lines = src.splitlines()
        first, last = body[0].lineno - 1, body[0].end_lineno
        src = "\n".join(lines[:first] + lines[last:])
    return src.rstrip()


def code_items(exclude_names: set) -> list:
    """(source, name, code) of pure-Python stdlib functions and methods of 5-40 lines
    (docstring removed, <= 1500 characters), none named in exclude_names."""
    out, seen = [], set()
    for qual, kind, name, obj in walk_stdlib():
        if kind != "function" or not inspect.isfunction(obj) or name in exclude_names:
            continue
        try:
            src = inspect.getsource(obj)
        except (OSError, TypeError):
            continue
        code = strip_docstring(src)
        if not code or not 5 <= code.count("\n") + 1 <= 40 or len(code) > 1500 or code in seen:
            continue
        seen.add(code)
        out.append((f"code:{qual}", name, code))
    return out


# ---- --extend: open-ended prose (self-authored lists of prose_lists.py) -------------------------

# The kinds of templated() whose subject is a concept / pair / activity / topic (prose answers).
PROSE_TEMPLATE_KINDS = ["explain", "compare", "advice", "write"]

# Share of each kind among the prose prompts (weights; a kind that runs out drops out and the
# others share its part). explain / compare / advice / write: make_prompts.py's lists and
# prose_lists.py's under more phrasings; the other kinds only exist here.
PROSE_WEIGHTS = {
    "explain": 18, "write": 13, "compare": 8, "advice": 10, "story": 14, "howto": 5,
    "dayinlife": 4, "email": 8, "plan": 4, "proscons": 4, "whatif": 3, "dialogue": 10,
}


def sibling(name: str):
    """The module NAME.py next to this file."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(name)


def prose_lists():
    return sibling("prose_lists")


def phrase_re(items) -> re.Pattern | None:
    """Matches any of `items` as a whole phrase (not inside a longer word), ignoring case."""
    alts = sorted({i.strip() for i in items if i.strip()}, key=lambda s: (-len(s), s))
    if not alts:
        return None
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(a) for a in alts) + r")(?!\w)", re.I)


def prose_entry_lists() -> dict:
    """{list name: entries} of every self-authored list that fills a prose prompt (pairs as
    (x, y) tuples): make_prompts.py's four (old_*) and prose_lists.py's."""
    P = prose_lists()
    return {
        "old_concepts": CONCEPTS, "old_pairs": PAIRS, "old_activities": ACTIVITIES,
        "old_topics": TOPICS, "concepts": P.CONCEPTS, "pairs": P.PAIRS,
        "activities": P.ACTIVITIES, "topics": P.TOPICS, "characters": P.CHARACTERS,
        "places": P.PLACES, "situations": P.SITUATIONS, "things": P.THINGS,
        "professions": P.PROFESSIONS,
        "recipients": [r for rs, _ in P.EMAIL_GROUPS for r in rs],
        "matters": [m for _, ms in P.EMAIL_GROUPS for m in ms], "goals": P.GOALS,
        "choices": P.CHOICES, "hypotheticals": P.HYPOTHETICALS,
        "dialogue_subjects": P.DIALOGUE_SUBJECTS,
    }


def held_out_prose_items(held_templated: list) -> dict:
    """{list name: entries} that a held-out templated prompt uses: an entry that occurs as a whole
    phrase (ignoring case) in one of `held_templated` (the prompts of test.jsonl and calib.jsonl
    with a "template:*" source); a pair when both its sides occur in one prompt."""
    def occurs(phrase: str, text: str) -> bool:  # both lower case
        at = text.find(phrase)
        while at >= 0:
            end = at + len(phrase)
            if not (at and (text[at - 1].isalnum() or text[at - 1] == "_")) and \
                    not (end < len(text) and (text[end].isalnum() or text[end] == "_")):
                return True
            at = text.find(phrase, at + 1)
        return False

    prompts = [p.lower() for p in held_templated]
    text = "\n".join(prompts)  # a line break is no word character: phrases stay apart
    out = {}
    for name, entries in prose_entry_lists().items():
        hits = []
        for e in entries:
            sides = [s.strip().lower() for s in (e if isinstance(e, tuple) else (e,))]
            if not all(occurs(s, text) for s in sides):
                continue
            if len(sides) == 1 or any(all(occurs(s, p) for s in sides) for p in prompts):
                hits.append(e)
        out[name] = hits
    return out


def prose_pool(rng: random.Random, held_templated: list):
    """Open-ended prose prompts for --extend: (candidates, banned, info). `candidates` yields
    (prompt, "template:<kind>"), kinds drawn by PROSE_WEIGHTS; explain / compare / advice /
    write / howto / dayinlife / email / plan / proscons / whatif are every (entry, phrasing) in a
    shuffled order, story (character x place x situation) and dialogue (two characters x subject)
    are drawn at random. `banned` matches every held-out item (held_out_prose_items; a pair: each
    side): no entry that contains one is used, no candidate contains one."""
    P = prose_lists()
    held = held_out_prose_items(held_templated)
    banned = phrase_re(s for es in held.values() for e in es
                       for s in (e if isinstance(e, tuple) else (e,)))

    def usable(e) -> bool:
        return banned is None or not any(banned.search(s) for s in (e if isinstance(e, tuple)
                                                                     else (e,)))

    templates = {
        "explain": P.EXPLAIN_TEMPLATES, "compare": P.COMPARE_TEMPLATES,
        "advice": P.ADVICE_TEMPLATES, "write": P.WRITE_TEMPLATES, "story": P.STORY_TEMPLATES,
        "howto": P.HOWTO_TEMPLATES, "dayinlife": P.DAYINLIFE_TEMPLATES,
        "email": P.EMAIL_TEMPLATES, "plan": P.PLAN_TEMPLATES,
        "proscons": P.PROSCONS_TEMPLATES, "whatif": P.WHATIF_TEMPLATES,
        "dialogue": P.DIALOGUE_TEMPLATES,
    }
    for kind, ts in templates.items():  # the fixed words never carry a held-out item
        for t in ts:
            if banned is not None and banned.search(re.sub(r"\{\w+\}", "|", t)):
                raise ValueError(f"prose template {t!r} contains a held-out item")
    excluded = {}

    def keep(name: str, entries: list) -> list:
        kept = [e for e in entries if usable(e)]
        excluded[name] = excluded.get(name, 0) + len(entries) - len(kept)
        return kept

    concepts = keep("concepts", CONCEPTS + P.CONCEPTS)
    pairs = keep("pairs", PAIRS + P.PAIRS)
    activities = keep("activities", ACTIVITIES + P.ACTIVITIES)
    topics = keep("topics", TOPICS + P.TOPICS)
    characters = keep("characters", P.CHARACTERS)
    places = keep("places", P.PLACES)
    situations = keep("situations", P.SITUATIONS)
    subjects = keep("dialogue_subjects", P.DIALOGUE_SUBJECTS)
    groups = [(keep("recipients", rs), keep("matters", ms)) for rs, ms in P.EMAIL_GROUPS]

    def each(kind: str, values: list, key: str) -> list:
        return [t.format(**{key: v}) for v in values for t in templates[kind]]

    enum = {
        "explain": each("explain", concepts, "c"),
        "compare": [t.format(x=x, y=y) for x, y in pairs for t in templates["compare"]],
        "advice": [t.format(a=a, n=rng.randint(3, 7)) for a in activities
                   for t in templates["advice"]],
        "write": each("write", topics, "t"),
        "howto": each("howto", keep("things", P.THINGS), "t"),
        "dayinlife": each("dayinlife", keep("professions", P.PROFESSIONS), "job"),
        "email": [t.format(r=r, m=m) for rs, ms in groups for r in rs for m in ms
                  for t in templates["email"]],
        "plan": each("plan", keep("goals", P.GOALS), "g"),
        "proscons": each("proscons", keep("choices", P.CHOICES), "x"),
        "whatif": each("whatif", keep("hypotheticals", P.HYPOTHETICALS), "h"),
    }
    for kind in enum:
        enum[kind] = list(dict.fromkeys(enum[kind]))
        rng.shuffle(enum[kind])
    sizes = {k: len(v) for k, v in enum.items()}
    sizes["story"] = len(characters) * len(places) * len(situations) * len(templates["story"])
    sizes["dialogue"] = len(characters) * (len(characters) - 1) * len(subjects) * \
        len(templates["dialogue"])
    info = {
        "held_out_items": {k: len(v) for k, v in held.items() if v},
        "entries_excluded": {k: v for k, v in excluded.items() if v},
        "candidates_by_kind": sizes,
    }

    def candidates():
        its = {k: iter(v) for k, v in enum.items()}
        drawn = {"story": 0, "dialogue": 0}
        live = [k for k in PROSE_WEIGHTS if sizes[k]]
        while live:
            kind = rng.choices(live, weights=[PROSE_WEIGHTS[k] for k in live])[0]
            if kind in its:
                p = next(its[kind], None)
            elif drawn[kind] >= sizes[kind]:  # as many draws as combinations: enough
                p = None
            elif kind == "story":
                p = rng.choice(templates["story"]).format(
                    ch=rng.choice(characters), p=rng.choice(places), s=rng.choice(situations))
            else:
                a, b = rng.sample(characters, 2)
                p = rng.choice(templates["dialogue"]).format(ch=a, b=b,
                                                             subj=rng.choice(subjects))
            if p is None:
                live.remove(kind)
                continue
            if kind in drawn:
                drawn[kind] += 1
            if banned is not None and banned.search(p):  # across the joins of entries: never
                continue
            yield p, f"template:{kind}"

    return candidates(), banned, info


def extend(args) -> int:
    """Writes args.extend training prompts (the committed train.jsonl first) to args.extend_out."""
    def read(name):
        with open(os.path.join(args.out, name), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    base = read("train.jsonl")
    held_rows = read("test.jsonl") + read("calib.jsonl")
    held = [r["prompt"] for r in held_rows]
    held_text = "\n\x00".join(held)
    rng = random.Random(args.seed + 1)
    items = stdlib_items(args.max_doc_chars)
    held_items = [it for it in items if it[4] in held_text]
    held_names = {it[2] for it in held_items}
    train_items = [it for it in items if it[4] not in held_text]
    seen = set(held) | {r["prompt"] for r in base}

    def fresh(prompt: str) -> str | None:
        prompt = re.sub(r" at 0x[0-9a-f]+", "", prompt)  # object addresses in signatures
        if prompt in seen:
            return None
        seen.add(prompt)
        return prompt

    # Each source: a list of (prompt, source) in its own shuffled order.
    docs = []
    for it in train_items:
        _, kind, name, sig, doc = it
        ts = MODULE_TEMPLATES if kind == "module" else CLASS_TEMPLATES if kind == "class" else \
            DOC_TEMPLATES + EXTRA_DOC_TEMPLATES
        for t in ts:
            docs.append((t.format(name=name, sig=sig, doc=doc), it[0]))
    topics = [(t.format(doc=text), src) for src, text in topic_sections(args.max_doc_chars)
              for t in TOPIC_TEMPLATES]
    codes = [(t.format(code=code), src) for src, name, code in code_items(held_names)
             for t in CODE_TEMPLATES]
    for pool in (docs, topics, codes):
        rng.shuffle(pool)

    # Open-ended prose (its own random stream, so that the other sources draw as before).
    held_templated = [r["prompt"] for r in held_rows if r["source"].startswith("template:")]
    prose, banned, prose_info = prose_pool(random.Random(args.seed + 2), held_templated)
    # Broad chat categories and Debian package descriptions (broad_sources.py; own stream too).
    broad, broad_info = sibling("broad_sources").broad_pool(random.Random(args.seed + 3))
    template_skipped = set()

    def templates():
        for _ in range(1000 * args.extend):
            kind = rng.choice(TEMPLATE_KINDS)
            p = templated(rng, kind)
            if kind in PROSE_TEMPLATE_KINDS and banned is not None and banned.search(p):
                template_skipped.add(p)  # uses a held-out concept / pair / activity / topic
                continue
            yield p, f"template:{kind}"

    def take(source):
        for prompt, src in source:
            p = fresh(prompt)
            if p is not None:
                return p, src
        return None

    # Round robin over `order` (docstrings 3, templated, code, topics 1 each per round), each
    # source until it runs out.
    sources = {"doc": iter(docs), "code": iter(codes), "topic": iter(topics),
               "template": templates()}
    order = ["doc", "doc", "template", "code", "topic", "doc"]

    def round_robin():
        live = list(order)
        while live:
            for kind in list(live):
                got = take(sources[kind])
                if got is None:
                    live = [k for k in live if k != kind]
                else:
                    yield kind, got

    # The prose pool takes a slot whenever it holds less than --prose-fraction of the new prompts
    # (the first, then about every 1/fraction-th); the round robin fills the others, so its
    # sources keep their proportions. Either one, once it runs out, leaves the rest to the other.
    # The broad pool takes a slot the same way, before the prose pool, with --broad-fraction.
    counts = {k: 0 for k in sources}
    counts["prose"] = 0
    counts["broad"] = 0
    rows = [{"prompt": r["prompt"], "source": r["source"]} for r in base]
    rr, rr_live, prose_live = round_robin(), True, args.prose_fraction > 0
    while len(rows) < args.extend and (rr_live or prose_live):
        new = len(rows) - len(base)
        got = None
        if args.broad_fraction > 0 and counts["broad"] < args.broad_fraction * (new + 1):
            got = take(broad)
            kind = "broad"
        elif prose_live and (counts["prose"] < args.prose_fraction * (new + 1) or not rr_live):
            got = take(prose)
            if got is None:
                prose_live = False
                continue
            kind = "prose"
        else:
            kind, got = next(rr, (None, None))
            if got is None:
                rr_live = False
                continue
        rows.append({"prompt": got[0], "source": got[1]})
        counts[kind] += 1
    os.makedirs(os.path.dirname(os.path.abspath(args.extend_out)), exist_ok=True)
    with open(args.extend_out, "w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            line = {"id": f"train-{i:06d}", "prompt": r["prompt"], "source": r["source"]}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    by_kind, broad_by_kind = {}, {}
    for r in rows[len(base):]:
        if r["source"].startswith("template:"):
            by_kind[r["source"]] = by_kind.get(r["source"], 0) + 1
        if r["source"].startswith(("broad:", "debian:")):
            k = r["source"] if r["source"].startswith("broad:") else "debian"
            broad_by_kind[k] = broad_by_kind.get(k, 0) + 1
    prose_available = sum(prose_info["candidates_by_kind"].values())
    info = {
        "seed": args.seed, "python": sys.version.split()[0], "prompts": len(rows),
        "from_committed_train": len(base), "new": counts,
        "new_templated_by_kind": dict(sorted(by_kind.items())),
        "available": {"doc": len(docs), "code": len(codes), "topic": len(topics),
                      "prose": prose_available},
        "prose_fraction": args.prose_fraction,
        "broad_fraction": args.broad_fraction,
        "new_broad_by_kind": dict(sorted(broad_by_kind.items())),
        "broad": broad_info,
        "prose_available_by_kind": prose_info["candidates_by_kind"],
        "held_out_docstrings_excluded": len(held_items),
        "held_out_prose_items": prose_info["held_out_items"],
        "prose_entries_excluded": prose_info["entries_excluded"],
        "templated_prose_skipped": len(template_skipped),
        "licences": {"stdlib": "PSF-2.0 (Python standard library docstrings and source code)",
                     "pydoc": "PSF-2.0 (Python documentation: pydoc_data.topics)",
                     "template": "self-authored (repository licence)",
                     "prose": "self-authored (tools/train/prose_lists.py; repository licence)",
                     "broad": "self-authored (tools/train/broad_sources.py; repository licence)",
                     "debian": "Debian 12 main package descriptions (DFSG-free packages' "
                               "debian/control, data/debian_descriptions.jsonl.xz)"},
    }
    info_file = os.path.splitext(args.extend_out)[0] + "_info.json"
    with open(info_file, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(json.dumps(info))
    if len(rows) < args.extend:
        print(f"only {len(rows)} distinct prompts (asked for {args.extend})", file=sys.stderr)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for train.jsonl / test.jsonl")
    ap.add_argument("--train", type=int, default=6000, help="training prompts")
    ap.add_argument("--test", type=int, default=128, help="held-out prompts (>= 64)")
    ap.add_argument("--calib", type=int, default=256,
                    help="held-out prompts for `dspark calibrate` (not trained on, not tested)")
    ap.add_argument("--doc-fraction", type=float, default=0.6,
                    help="share of stdlib-docstring prompts (the rest are templated)")
    ap.add_argument("--max-doc-chars", type=int, default=700)
    ap.add_argument("--seed", type=int, default=20260529)
    ap.add_argument("--extend", type=int, default=0,
                    help="write this many training prompts to --extend-out instead (the "
                         "committed sets under --out stay as they are)")
    ap.add_argument("--extend-out", default="", help="[--out/train_large.jsonl]")
    ap.add_argument("--prose-fraction", type=float, default=0.22,
                    help="--extend: share of the new prompts taken from the open-ended prose "
                         "pool (prose_lists.py)")
    ap.add_argument("--broad-fraction", type=float, default=0.0,
                    help="--extend: share of the new prompts taken from the broad chat "
                         "categories and Debian package descriptions (broad_sources.py)")
    args = ap.parse_args()
    if args.extend:
        warnings.simplefilter("ignore")
        args.extend_out = args.extend_out or os.path.join(args.out, "train_large.jsonl")
        return extend(args)
    warnings.simplefilter("ignore")  # deprecation notes of stdlib modules imported for their docs
    if args.test < 64:
        ap.error("--test must be >= 64")
    rng = random.Random(args.seed)
    items = stdlib_items(args.max_doc_chars)
    rng.shuffle(items)
    total = args.train + args.test + args.calib
    n_doc = min(len(items), int(round(total * args.doc_fraction)))
    # The split is by source item; the held-out sets get the same mix as the training set.
    n_doc_test = int(round(args.test * n_doc / total))
    n_doc_calib = int(round(args.calib * n_doc / total))
    rows = {"train": [], "test": [], "calib": []}
    for i, item in enumerate(items[:n_doc]):
        split = "test" if i < n_doc_test else "calib" if i < n_doc_test + n_doc_calib else "train"
        rows[split].append({"prompt": doc_prompt(rng, item), "source": item[0]})
    seen = set(r["prompt"] for rs in rows.values() for r in rs)
    for split, want in (("test", args.test), ("calib", args.calib), ("train", args.train)):
        tries = 0
        while len(rows[split]) < want:
            tries += 1
            if tries > 100 * total:
                raise RuntimeError("not enough distinct templated prompts")
            kind = rng.choice(TEMPLATE_KINDS)
            p = templated(rng, kind)
            if p in seen:
                continue
            seen.add(p)
            rows[split].append({"prompt": p, "source": f"template:{kind}"})
    os.makedirs(args.out, exist_ok=True)
    for split, rs in rows.items():
        rng.shuffle(rs)
        with open(os.path.join(args.out, f"{split}.jsonl"), "w", encoding="utf-8") as f:
            for i, r in enumerate(rs):
                line = {"id": f"{split}-{i:05d}", "prompt": r["prompt"], "source": r["source"]}
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    info = {
        "seed": args.seed, "python": sys.version.split()[0], "stdlib_items": len(items),
        "train": len(rows["train"]), "test": len(rows["test"]), "calib": len(rows["calib"]),
        "doc_prompts": n_doc,
        "licences": {"stdlib": "PSF-2.0 (Python standard library docstrings)",
                     "template": "self-authored (repository licence)"},
    }
    with open(os.path.join(args.out, "prompts_info.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
