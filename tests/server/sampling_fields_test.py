"""logprobs / top_logprobs, presence / frequency / repetition penalties and n > 1 through
dspark serve (the official `openai` client), on a server without drafting, with the target drafting
for itself (many accepted drafts) and with the DFlash fixture:
  - greedy completions with penalties == `dspark generate` with the same penalties (plain
    decoding, its own code path), and the penalties change the text (or the check proves little);
  - token_logprobs == dspark generate's per-token log-probabilities within 1e-4, the same on
    every server (speculation does not change the values beyond float rounding);
  - chat logprobs: one entry per completion token, top_logprobs sorted, the chosen token's value
    equal to its entry when listed, exp sums <= 1, greedy picks the first entry, bytes = UTF-8;
  - streamed logprobs (chat and completions) concatenate to the non-streamed ones, text_offset
    counts the text;
  - n = 3 sampled: choice i is the n = 1 request with seed + i and dspark generate --seed seed+i;
    usage sums completion tokens; streamed chunks carry the index; greedy n = 2 gives equal
    choices.
"""

import math
import os

from server_util import Server, args, check, generate

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "qwen3")
DFLASH = os.path.join(ROOT, "tests/data/drafters/qwen3_dflash")
PROMPT = "The cat sat on the mat. The cat sat on the"
N = 24
PEN = {"presence_penalty": 0.6, "frequency_penalty": 0.4}
REP = 1.3
TOL = 1e-4


def reference(*extra):
    return generate(DSPARK, M, PROMPT, N, "--temperature", "0", "--logprobs", "2", *extra)


def close(a, b, what):
    check(len(a) == len(b), f"{what}: {len(a)} vs {len(b)} values")
    for i, (x, y) in enumerate(zip(a, b)):
        check(abs(x - y) <= TOL, f"{what}: value {i}: {x} vs {y}")


def check_chat_entries(content, greedy, what):
    for e in content:
        check(e.bytes == list(e.token.encode()), f"{what}: bytes {e}")
        tops = e.top_logprobs
        for a, b in zip(tops, tops[1:]):
            check(a.logprob >= b.logprob, f"{what}: top_logprobs not sorted {tops}")
        check(sum(math.exp(t.logprob) for t in tops) <= 1 + 1e-6, f"{what}: mass {tops}")
        check(e.logprob <= 0, f"{what}: logprob {e.logprob}")
        for t in tops:
            if t.token == e.token:
                check(abs(t.logprob - e.logprob) <= 1e-6 or "\ufffd" in t.token,
                      f"{what}: chosen {e.logprob} vs its entry {t.logprob}")
        if greedy and tops:
            check(e.logprob >= tops[0].logprob - 1e-6, f"{what}: greedy {e.logprob} {tops[0]}")


def completions_checks(client, ref, ref_pen):
    base = dict(model="qwen3", prompt=PROMPT, max_tokens=N, temperature=0, logprobs=2)
    # Penalties: the plain reference's text and per-token log-probabilities.
    r = client.completions.create(**base, **PEN, extra_body={"repetition_penalty": REP})
    c = r.choices[0]
    check(c.text == ref_pen["text"], f"penalized text {c.text!r} vs {ref_pen['text']!r}")
    close(c.logprobs.token_logprobs, [e["logprob"] for e in ref_pen["logprobs"]], "penalized")
    check(len(c.logprobs.tokens) == r.usage.completion_tokens -
          (ref_pen["finish_reason"] == "eos"), f"entries {len(c.logprobs.tokens)} {r.usage}")
    for top, tok, lp in zip(c.logprobs.top_logprobs, c.logprobs.tokens, c.logprobs.token_logprobs):
        check(len(top) <= 3 and top.get(tok) == lp or "\ufffd" in tok, f"top {top} {tok} {lp}")
    # Without penalties: the plain reference too.
    plain = client.completions.create(**base)
    check(plain.choices[0].text == ref["text"], f"text {plain.choices[0].text!r}")
    close(plain.choices[0].logprobs.token_logprobs, [e["logprob"] for e in ref["logprobs"]],
          "unpenalized")
    # Streamed: the same entries, text_offset counting the text.
    toks, lps, offs, text = [], [], [], ""
    for chunk in client.completions.create(**base, **PEN, stream=True,
                                           extra_body={"repetition_penalty": REP}):
        for ch in chunk.choices:
            text += ch.text
            if ch.logprobs:
                toks += ch.logprobs.tokens
                lps += ch.logprobs.token_logprobs
                offs += ch.logprobs.text_offset
    check(text == c.text and toks == c.logprobs.tokens, f"stream {text!r} {toks}")
    close(lps, c.logprobs.token_logprobs, "streamed")
    check(offs == c.logprobs.text_offset, f"offsets {offs} vs {c.logprobs.text_offset}")
    check(offs == [sum(len(t) for t in toks[:i]) for i in range(len(toks))], f"offsets {offs}")
    return c.text, c.logprobs.token_logprobs


def chat_checks(client):
    msgs = [{"role": "user", "content": "Tell me about cats and mats."}]
    base = dict(model="qwen3", messages=msgs, max_tokens=N, temperature=0, logprobs=True,
                top_logprobs=5, **PEN)
    r = client.chat.completions.create(**base)
    content = r.choices[0].logprobs.content
    check(len(content) in (r.usage.completion_tokens, r.usage.completion_tokens - 1),
          f"{len(content)} entries for {r.usage.completion_tokens} tokens")
    check(all(len(e.top_logprobs) == 5 for e in content), "top_logprobs count")
    check_chat_entries(content, True, "chat")
    check("".join(e.token for e in content).startswith(r.choices[0].message.content[:1]) or
          "\ufffd" in "".join(e.token for e in content), "tokens spell the content")
    streamed, text = [], ""
    for chunk in client.chat.completions.create(**base, stream=True):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            if ch.logprobs and ch.logprobs.content:
                streamed += ch.logprobs.content
    check(text == r.choices[0].message.content, f"streamed {text!r}")
    check([e.token for e in streamed] == [e.token for e in content], "streamed tokens")
    close([e.logprob for e in streamed], [e.logprob for e in content], "streamed chat")
    # logprobs off: null.
    off = client.chat.completions.create(model="qwen3", messages=msgs, max_tokens=4)
    check(off.choices[0].logprobs is None, f"logprobs {off.choices[0].logprobs}")
    return r.choices[0].message.content


def n_checks(client):
    base = dict(model="qwen3", prompt=PROMPT, max_tokens=12, temperature=0.9, seed=5)
    r = client.completions.create(**base, n=3)
    check([c.index for c in r.choices] == [0, 1, 2], f"indices {r.choices}")
    texts = [c.text for c in r.choices]
    for i in range(3):
        one = client.completions.create(**{**base, "seed": 5 + i})
        check(one.choices[0].text == texts[i], f"choice {i}: {texts[i]!r} vs {one.choices[0].text!r}")
        ref = generate(DSPARK, M, PROMPT, 12, "--temperature", "0.9", "--seed", str(5 + i))
        check(ref["text"] == texts[i], f"choice {i} vs dspark generate: {ref['text']!r}")
    check(len(set(texts)) > 1, f"three seeds, one text: {texts}")
    one_usage = client.completions.create(**base).usage
    check(r.usage.prompt_tokens == one_usage.prompt_tokens, f"prompt tokens {r.usage}")
    check(r.usage.completion_tokens == 36, f"completion tokens {r.usage}")
    # Streamed: chunks carry the index; each choice's text as above.
    streamed = {}
    finishes = {}
    for chunk in client.completions.create(**base, n=3, stream=True):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    check([streamed.get(i) for i in range(3)] == texts, f"streamed {streamed}")
    check(sorted(finishes) == [0, 1, 2], f"finishes {finishes}")
    # Chat, streamed with logprobs: per-index entries, a role chunk per choice.
    roles, content = {}, {}
    for chunk in client.chat.completions.create(
            model="qwen3", messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=2,
            temperature=0.8, seed=9, stream=True, logprobs=True, top_logprobs=1):
        for c in chunk.choices:
            if c.delta.role:
                roles[c.index] = c.delta.role
            if c.logprobs and c.logprobs.content:
                content.setdefault(c.index, []).extend(c.logprobs.content)
    check(roles == {0: "assistant", 1: "assistant"}, f"roles {roles}")
    for i in (0, 1):
        check_chat_entries(content.get(i, []), False, f"n=2 choice {i}")
    # Greedy n = 2: equal choices.
    g = client.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=8, temperature=0, n=2)
    check(g.choices[0].message.content == g.choices[1].message.content, f"greedy {g.choices}")
    return texts


def main():
    ref = reference()
    ref_pen = reference("--presence-penalty", "0.6", "--frequency-penalty", "0.4",
                        "--repetition-penalty", str(REP))
    check(ref_pen["text"] != ref["text"], "the penalties do not change the reference text")
    results = []
    # A fixed draft length: every configuration with a source drafts (and verifies) every round.
    for draft in (["--draft", "none"], ["--draft", "model:" + M, "--draft-policy", "fixed"],
                  ["--draft", DFLASH, "--draft-policy", "fixed"]):
        with Server(DSPARK, M, *draft) as srv:
            client = srv.client()
            text, lps = completions_checks(client, ref, ref_pen)
            chat = chat_checks(client)
            texts = n_checks(client)
            results.append((draft[1], text, lps, chat, texts))
            if draft[1] != "none":
                u = client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=N,
                                              temperature=0, **PEN).usage
                s = u.model_extra["speculation"]
                # The target drafting for itself gets drafts accepted; the random DFlash fixture
                # drafts (and its rejections go through the same verify rows).
                check(s["drafted"] > 0 and (s["accepted"] > 0 or draft[1] == DFLASH),
                      f"{draft}: speculation {s}")
    base = results[0]
    for name, text, lps, chat, texts in results[1:]:
        check(text == base[1] and chat == base[3] and texts == base[4], f"{name} differs")
        close(lps, base[2], f"{name} logprobs")


if __name__ == "__main__":
    from server_util import run_test
    run_test(main)
