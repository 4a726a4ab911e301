"""dspark serve through the official `openai` client: completions and chat, streaming and not, against
`dspark generate` (plain decoding, its own code path) as the reference:
  - greedy completions (text prompt and token-id prompt) == dspark generate, token counts in usage;
  - streamed deltas concatenate to the same text; include_usage adds the usage chunk;
  - chat == dspark generate on the conversation rendered by hand in ChatML (the fixture's template);
  - seeded sampling (temperature/top_k/top_p/min_p) == dspark generate with the same seed
    (server without drafting: the same Philox draws);
  - stop strings: the same text and finish_reason "stop", streamed with hold-back;
  - finish_reason mapping, usage.speculation, /v1/models, /health, /metrics counters.
"""

import json
import os

from tokenizers import Tokenizer

from server_util import Server, args, check, fail, generate, wait_until

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "qwen3")
PROMPT = "The cat sat on the mat. The cat sat on the"
N = 40


def stream_completion(client, **kw):
    text, finish, usage, n_chunks = "", None, None, 0
    for chunk in client.completions.create(stream=True, **kw):
        n_chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            if c.finish_reason is not None:
                finish = c.finish_reason
    return text, finish, usage, n_chunks


def stream_chat(client, **kw):
    text, finish, usage, roles = "", None, None, []
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            text += c.delta.content or ""
            if c.finish_reason is not None:
                finish = c.finish_reason
    return text, finish, usage, roles


def openai_finish(reason):
    return {"eos": "stop", "stop": "stop", "length": "length"}[reason]


def chatml(messages):
    """The fixture's chat template by hand (checked against tokenizer_config.json below)."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n"


def speculation_ok(usage):
    s = usage.model_extra["speculation"] if hasattr(usage, "model_extra") else usage["speculation"]
    check(s["drafted"] >= s["accepted"] >= 0 and s["rounds"] > 0, f"speculation {s}")
    # adaptive by default, fixed without a draft source; the chosen length is at most --gamma
    # (the source's default: 4 here).
    check(s["draft_policy"] in ("adaptive", "fixed") and 0 <= s["mean_draft_length"] <= 4,
          f"speculation policy {s}")
    return s


def main():
    config = json.load(open(os.path.join(M, "tokenizer_config.json")))
    tmpl = config["chat_template"]
    check("'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'" in tmpl
          and "<|im_start|>assistant\\n" in tmpl,
          "the fixture's chat template is not the ChatML template this test renders by hand")

    ref = generate(DSPARK, M, PROMPT, N, "--temperature", "0")
    # A fixed draft length: the checks below need drafts in every round (the adaptive default
    # may draft nothing where its cost profile says drafting does not pay, as under a sanitizer).
    with Server(DSPARK, M, "--draft", "ngram", "--draft-policy", "fixed") as srv:
        client = srv.client()
        models = client.models.list()
        check([m.id for m in models.data] == ["qwen3"], f"models {models}")
        check(client.models.retrieve("qwen3").id == "qwen3", "models/qwen3")
        check(srv.get("/health") == (200, '{"status":"ok"}'), "health")

        # Completions, not streamed.
        r = client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=N, temperature=0)
        check(r.object == "text_completion" and r.id.startswith("cmpl-"), f"object {r}")
        check(r.choices[0].text == ref["text"],
              f"completion {r.choices[0].text!r} != generate {ref['text']!r}")
        check(r.choices[0].finish_reason == openai_finish(ref["finish_reason"]), "finish_reason")
        check(r.usage.prompt_tokens == ref["n_prompt"], f"prompt_tokens {r.usage}")
        check(r.usage.completion_tokens == ref["n_generated"], f"completion_tokens {r.usage}")
        check(r.usage.total_tokens == ref["n_prompt"] + ref["n_generated"], "total_tokens")
        s = speculation_ok(r.usage)
        check(s["accepted"] > 0, f"prompt lookup accepted nothing on a repetitive text: {s}")

        # The same prompt as token ids (encoded by the `tokenizers` library).
        ids = Tokenizer.from_file(os.path.join(M, "tokenizer.json")).encode(PROMPT).ids
        check(len(ids) == ref["n_prompt"], f"tokenizers gives {len(ids)} ids")
        r2 = client.completions.create(model="qwen3", prompt=ids, max_tokens=N, temperature=0)
        check(r2.choices[0].text == ref["text"], f"token-id prompt {r2.choices[0].text!r}")
        check(r2.usage.prompt_tokens == len(ids), f"token-id prompt usage {r2.usage}")

        # Streamed: the same text, usage in the last chunk.
        text, finish, usage, n_chunks = stream_completion(
            client, model="qwen3", prompt=PROMPT, max_tokens=N, temperature=0,
            stream_options={"include_usage": True})
        check(text == ref["text"], f"streamed {text!r} != {ref['text']!r}")
        check(n_chunks > 3, f"only {n_chunks} chunks: not streamed")
        check(finish == openai_finish(ref["finish_reason"]), f"stream finish {finish}")
        check(usage is not None and usage.completion_tokens == ref["n_generated"],
              f"stream usage {usage}")
        text, _, usage, _ = stream_completion(client, model="qwen3", prompt=PROMPT, max_tokens=N,
                                              temperature=0)
        check(text == ref["text"] and usage is None, "stream without include_usage")

        # Stop strings: generate --stop is the reference (streamed with hold-back too).
        stop = ref["text"][12:16]
        check(len(stop) == 4 and "\ufffd" not in stop, f"bad stop string from {ref['text']!r}")
        ref_stop = generate(DSPARK, M, PROMPT, N, "--temperature", "0", "--stop", stop,
                            "--stop", "zzzz")
        check(ref_stop["finish_reason"] == "stop", f"reference did not stop: {ref_stop}")
        r = client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=N, temperature=0,
                                      stop=[stop, "zzzz"])
        check(r.choices[0].text == ref_stop["text"] and r.choices[0].finish_reason == "stop",
              f"stop: {r.choices[0].text!r} ({r.choices[0].finish_reason}) != "
              f"{ref_stop['text']!r}")
        text, finish, _, _ = stream_completion(client, model="qwen3", prompt=PROMPT, max_tokens=N,
                                               temperature=0, stop=stop)
        check(text == ref_stop["text"] and finish == "stop", f"streamed stop: {text!r} {finish}")

        # Chat: the conversation rendered by hand, continued by generate.
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"role": "user", "content": "Another one, please."}]
        ref_chat = generate(DSPARK, M, chatml(messages), 24, "--temperature", "0")
        r = client.chat.completions.create(model="qwen3", messages=messages,
                                           max_completion_tokens=24, temperature=0)
        check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"object {r}")
        msg = r.choices[0].message
        check(msg.role == "assistant", f"role {msg.role}")
        check(msg.content == ref_chat["text"], f"chat {msg.content!r} != {ref_chat['text']!r}")
        check(r.usage.prompt_tokens == ref_chat["n_prompt"], f"chat prompt tokens {r.usage}")
        check(r.choices[0].finish_reason == openai_finish(ref_chat["finish_reason"]), "chat finish")
        text, finish, usage, roles = stream_chat(client, model="qwen3", messages=messages,
                                                 max_tokens=24, temperature=0,
                                                 stream_options={"include_usage": True})
        check(text == ref_chat["text"] and roles == ["assistant"], f"chat stream {text!r} {roles}")
        check(usage.completion_tokens == ref_chat["n_generated"], f"chat stream usage {usage}")
        # Text parts are accepted (one part: the same prompt).
        parts = [dict(m, content=[{"type": "text", "text": m["content"]}]) for m in messages]
        r = client.chat.completions.create(model="qwen3", messages=parts, max_tokens=24,
                                           temperature=0)
        check(r.choices[0].message.content == ref_chat["text"], "chat with content parts")
        # The conversation was sent before: its full KV pages (16 tokens each) are reused, and the
        # text is still the plain greedy one (checked just above).
        cached = r.usage.prompt_tokens_details.cached_tokens
        check(cached >= 16 and cached % 16 == 0 and cached < r.usage.prompt_tokens,
              f"prefix cache: {cached} cached of {r.usage.prompt_tokens} prompt tokens")

        # (A streamed response is counted once its last byte is written: wait for it.)
        wait_until(lambda: srv.metrics().get(
            'dspark_http_responses_total{route="completions",status="200"}') == 6 and
            srv.metrics().get('dspark_http_responses_total{route="chat",status="200"}') == 3,
            10, "the response counters (6 completions, 3 chats)")
        m = srv.metrics()
        check(m['dspark_requests_finished_total{reason="length"}'] +
              m['dspark_requests_finished_total{reason="stop"}'] == 9, f"finished {m}")
        check(m["dspark_generation_tokens_total"] > 0 and m["dspark_prompt_tokens_total"] > 0,
              "token counters")
        check(m["dspark_spec_drafted_tokens_total"] >= m["dspark_spec_accepted_tokens_total"] > 0,
              "spec counters")
        check(m["dspark_spec_tau"] > 1.0, f"tau {m['dspark_spec_tau']}")
        check(m['dspark_spec_draft_policy{policy="fixed"}'] == 1 and
              m['dspark_spec_draft_policy{policy="adaptive"}'] == 0, "draft policy gauge")
        check(0 < m["dspark_spec_mean_draft_length"] <= 4, "mean draft length")
        probes = [m[f'dspark_spec_probes_total{{outcome="{o}"}}'] for o in ("offered", "taken", "accepted")]
        check(probes == [0, 0, 0], f"no probes under the fixed policy: {probes}")
        check(m["dspark_kv_pages_used"] == 0 and m["dspark_live_rows"] == 0, "idle gauges")
        check(m["dspark_prefix_reused_tokens_total"] >= cached and m["dspark_kv_pages_cached"] > 0,
              "prefix cache metrics")

    # --no-prefix-cache: the same conversation twice, nothing reused.
    with Server(DSPARK, M, "--draft", "ngram", "--no-prefix-cache") as srv:
        client = srv.client()
        for _ in range(2):
            r = client.chat.completions.create(model="qwen3", messages=messages, max_tokens=24,
                                               temperature=0)
            check(r.choices[0].message.content == ref_chat["text"], "chat without prefix cache")
            check(r.usage.prompt_tokens_details.cached_tokens == 0, "--no-prefix-cache reused")
            check(speculation_ok(r.usage)["draft_policy"] == "adaptive", "the default policy")
        m = srv.metrics()
        check(m['dspark_spec_draft_policy{policy="adaptive"}'] == 1 and
              m['dspark_spec_draft_policy{policy="fixed"}'] == 0, "default draft policy gauge")

    # Seeded sampling: the server draws what the same engine draws for that seed from the CLI
    # (`generate --draft ...` runs the speculative engine; plain `generate` uses other Philox
    # sub-streams for decode tokens, so it is not the reference here).
    sampling = ["--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.02"]
    for server_args, cli_args in ((["--draft", "none"], ["--draft", "ngram", "--gamma", "0"]),
                                  (["--draft", "ngram", "--gamma", "3"],
                                   ["--draft", "ngram", "--gamma", "3"])):
        with Server(DSPARK, M, *server_args) as srv:
            client = srv.client()
            for seed in (1, 77):
                ref_s = generate(DSPARK, M, PROMPT, N, *sampling, "--seed", str(seed), *cli_args)
                r = client.completions.create(model="qwen3", prompt=PROMPT, max_tokens=N,
                                              temperature=0.9, top_p=0.95, seed=seed,
                                              extra_body={"top_k": 40, "min_p": 0.02})
                check(r.choices[0].text == ref_s["text"],
                      f"{server_args} seed {seed}: {r.choices[0].text!r} != generate "
                      f"{ref_s['text']!r}")
                check(r.usage.completion_tokens == ref_s["n_generated"], "sampled length")
            check(ref_s["text"] != ref["text"], "sampling produced the greedy text")
            s = speculation_ok(r.usage)
            if server_args[1] == "none":
                check(s["drafted"] == 0 and abs(s["tau"] - 1.0) < 1e-9, f"plain decoding {s}")
    print("PASS")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 (a client exception is a test failure with a message)
        fail(f"{type(e).__name__}: {e}")
