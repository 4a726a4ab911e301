#!/usr/bin/env python3
"""Self-instruct training prompts: the target writes questions in the chat categories of issue 39,
then answers some of them, and a follow-up that refers to its answer makes a second turn.

  1. ask:      "Write one question a user might ask ... about TOPIC (a CATEGORY request)" prompts
               (self-authored, seeded), answered by the target with `dspark regen` at
               --temperature (sampled, --seed) -> candidate questions;
  2. filter:   cleaned (quotes, "Question:" labels, preambles dropped), 12..700 characters,
               deduplicated, and none that overlaps the held-out evaluation set
               (tools/eval/data/chat_eval.jsonl, broad_sources.EvalFilter);
  3. answer:   the first --followups questions answered greedily by the target (`dspark regen`),
               each followed by a follow-up turn that refers to the answer ("Give an example of
               what you just described", ...) -> multi-turn prompts {"messages": [user, assistant,
               user]}: the training regen then generates the second answer with the first in
               context.

Output: OUT/self_instruct.jsonl (questions as {"id", "prompt", "source": "self-instruct:CAT"},
then the conversations as {"id", "messages", "source": "self-instruct:multi-turn"}), which
pipeline.sh spreads evenly through the training prompts (SELF_INSTRUCT_N), and OUT/self_instruct_info.json.
Deterministic for one binary, model, device and seed (sampling uses dspark's seeded Philox).

    python3 tools/train/self_instruct.py --dspark build/bin/dspark --model MODEL --out DIR \
        --questions 20000 --followups 5000 --device cuda [--chat-template FILE]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import broad_sources as bs  # noqa: E402

CATEGORIES = {
    "writing": ("a request for a piece of writing, such as a poem, a story, an email, a speech "
                "or a review", bs.WRITING_SUBJECTS),
    "roleplay": ("a request to play a character in a situation and answer in character",
                 bs.PERSONAS),
    "reasoning": ("a logic puzzle or a question that needs careful step-by-step reasoning",
                  bs.WRITING_SUBJECTS + bs.STEM_TOPICS),
    "math": ("a maths problem with concrete numbers", ["percentages", "fractions", "geometry",
             "probability", "algebra", "statistics", "speed and distance", "money and interest",
             "sequences", "calculus", "units of measurement", "prime numbers"]),
    "coding": ("a programming task or a question about code in Python, JavaScript, C, Go, Rust, "
               "SQL or shell", ["strings", "lists and arrays", "files", "dates and times",
               "sorting", "recursion", "classes", "error handling", "web requests", "databases",
               "regular expressions", "testing", "command-line tools", "data structures"]),
    "extraction": ("a task that includes a short text (write the text too) and asks to extract, "
                   "classify or reformat information from it", ["an email", "a receipt",
                   "a timetable", "a product review", "meeting notes", "a news paragraph",
                   "a job advert", "a recipe", "a contact list", "a weather report"]),
    "stem": ("a question about science, technology, engineering or medicine", bs.STEM_TOPICS),
    "humanities": ("a question about history, philosophy, literature, art, economics or culture",
                   bs.HUMANITIES_TOPICS),
}
ASK = [
    "Write one {level} question that a user might ask an AI assistant about {topic}. It should "
    "be {desc}. Reply with the question only.",
    "Invent a realistic {level} request someone could type into a chat assistant: {desc}, "
    "related to {topic}. Write only the request.",
    "Give me one example of {desc}, on the subject of {topic}. Write it as the user would, "
    "nothing else.",
]
LEVELS = ["simple", "short", "detailed", "tricky", "practical", "beginner's", "curious"]
FOLLOWUPS = [
    "Can you explain that more simply?",
    "Give me a concrete example of what you just described.",
    "Summarise your answer in three bullet points.",
    "What is the most important point in your answer, and why?",
    "Rewrite your answer for a ten-year-old.",
    "Are there any limitations or mistakes in what you said?",
    "Turn your answer into a short checklist.",
    "Now say the same thing in a more formal tone.",
    "Can you expand on the second point you made?",
    "Make your answer half as long.",
    "What would someone who disagrees with your answer say?",
    "Give me a follow-up exercise based on your answer, with its solution.",
]
PREAMBLE = re.compile(r"^(sure|certainly|here('s| is)|of course|okay|ok)\b[^\n:]*[:.!]\s*",
                      re.IGNORECASE)


def ask_prompts(n: int, rng: random.Random) -> list:
    cats = sorted(CATEGORIES)
    rows = []
    for i in range(n):
        cat = cats[i % len(cats)]
        desc, topics = CATEGORIES[cat]
        text = rng.choice(ASK).format(level=rng.choice(LEVELS), topic=rng.choice(topics),
                                      desc=desc)
        rows.append({"id": f"si-ask-{i:06d}", "prompt": text, "source": f"self-instruct:{cat}"})
    return rows


LEAD_IN = re.compile(r"^((a|the) user (might|could|would|may) (ask|type|say|write)|question|"
                     r"request|user|example)\s*\d*\s*[:,\-]?\s*", re.IGNORECASE)
QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{12,})[\"\u201d]")


def clean(text: str) -> str:
    """The question itself: without a preamble ("Sure, here is ..."), a lead-in ("A user might
    ask:"), or the quotes around it; a quoted request inside other text is taken alone."""
    t = PREAMBLE.sub("", text.strip()).strip()
    t = LEAD_IN.sub("", t).strip()
    quoted = QUOTED.search(t)
    if quoted and len(quoted.group(1)) < len(t) - 2:
        t = quoted.group(1)
    return t.strip().strip('"').strip("\u201c\u201d").strip()


def regen(args, prompts_file: str, out_dir: str, max_tokens: int, temperature: float) -> list:
    cmd = [args.dspark, "regen", "-m", args.model, "--prompts", prompts_file, "--out", out_dir,
           "--device", args.device, "--batch", str(args.batch), "--max-tokens", str(max_tokens),
           "--taps", "none", "--temperature", str(temperature), "--seed", str(args.seed),
           "--chat"]
    if args.chat_template:
        cmd += ["--chat-template", args.chat_template]
    if args.max_seconds:
        cmd += ["--max-seconds", str(args.max_seconds)]
    print("self_instruct:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(os.path.join(out_dir, "responses.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_jsonl(path: str, rows: list) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dspark", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--questions", type=int, default=20000, help="questions asked for")
    ap.add_argument("--followups", type=int, default=5000,
                    help="questions answered and given a follow-up turn (multi-turn prompts)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=20261204)
    ap.add_argument("--chat-template", default="")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="time budget of each regen call (0: none)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)

    asks = ask_prompts(args.questions, rng)
    ask_file = os.path.join(args.out, "ask_prompts.jsonl")
    write_jsonl(ask_file, asks)
    source_of = {r["id"]: r["source"] for r in asks}
    answers = regen(args, ask_file, os.path.join(args.out, "ask"), 160, args.temperature)

    flt = bs.EvalFilter()
    seen, questions, rejected = set(), [], {"length": 0, "duplicate": 0, "eval_overlap": 0}
    for r in sorted(answers, key=lambda r: r["id"]):
        q = clean(r.get("text", ""))
        if not 12 <= len(q) <= 700 or r.get("finish_reason") == "length":
            rejected["length"] += 1
            continue
        key = bs._norm(q)
        if key in seen:
            rejected["duplicate"] += 1
            continue
        if flt.overlaps(q):
            rejected["eval_overlap"] += 1
            continue
        seen.add(key)
        questions.append({"id": f"si-{len(questions):06d}", "prompt": q,
                          "source": source_of[r["id"]]})

    conversations = []
    if args.followups > 0 and questions:
        first = questions[: args.followups]
        q_file = os.path.join(args.out, "followup_questions.jsonl")
        write_jsonl(q_file, first)
        replies = {r["id"]: r for r in regen(args, q_file, os.path.join(args.out, "answer"),
                                             256, 0.0)}
        for q in first:
            r = replies.get(q["id"])
            if r is None or r.get("finish_reason") != "eos" or not r.get("text", "").strip():
                continue  # an unfinished first answer would make an odd history
            follow = rng.choice(FOLLOWUPS)
            conversations.append({
                "id": f"si-mt-{len(conversations):06d}",
                "messages": [{"role": "user", "content": q["prompt"]},
                             {"role": "assistant", "content": r["text"].strip()},
                             {"role": "user", "content": follow}],
                "source": "self-instruct:multi-turn"})

    write_jsonl(os.path.join(args.out, "self_instruct.jsonl"), questions + conversations)
    by_source = {}
    for r in questions + conversations:
        by_source[r["source"]] = by_source.get(r["source"], 0) + 1
    info = {"seed": args.seed, "temperature": args.temperature, "asked": len(asks),
            "answered": len(answers), "questions": len(questions),
            "conversations": len(conversations), "rejected": rejected,
            "by_source": dict(sorted(by_source.items())), "model": args.model,
            "licence": "generated by the target model from self-authored instructions"}
    with open(os.path.join(args.out, "self_instruct_info.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
