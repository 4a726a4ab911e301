"""dspark serve --draft mtp --draft-policy fixed (the target's MTP layer, on the tiny GLM-4.5 MTP
fixture; fixed, because the adaptive policy may rightly draft nothing where the MTP layer costs
about as much as the verify, as in a sanitizer build): greedy
completions equal `dspark generate` (plain decoding), and the speculation is reported like any
other source's: usage.speculation and the /metrics counters count the MTP's drafts. A long prompt
sent twice reuses its prefix (the target's pages and the MTP layer's rows, cached_tokens > 0) and
completes as `dspark generate` does."""

import os

from server_util import Server, args, check, generate, run_test, wait_until

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "glm4_moe_mtp")
PROMPTS = ["Small models are cheap to run.", "Beautiful is better than ugly."]
LONG = ("Explicit is better than implicit. Simple is better than complex. Complex is better than "
        "complicated. Flat is better than nested.")
N = 24


def main():
    if not os.path.isdir(M):
        print("SKIP: no MTP fixture")
        return
    refs = [generate(DSPARK, M, p, N, "--temperature", "0") for p in PROMPTS]
    with Server(DSPARK, M, "--draft", "mtp", "--draft-policy", "fixed") as srv:
        client = srv.client()
        drafted = 0
        for prompt, ref in zip(PROMPTS, refs):
            r = client.completions.create(model="glm4_moe_mtp", prompt=prompt, max_tokens=N,
                                          temperature=0)
            check(r.choices[0].text == ref["text"],
                  f"completion {r.choices[0].text!r} != generate {ref['text']!r}")
            s = r.usage.model_extra["speculation"]
            check(s["rounds"] > 0 and s["drafted"] >= s["accepted"] >= 0, f"speculation {s}")
            drafted += s["drafted"]
        check(drafted > 0, "the MTP layer drafted nothing")
        wait_until(lambda: srv.metrics().get("dspark_spec_drafted_tokens_total", 0) >= drafted,
                   10, "the drafted-token counter")
        ref = generate(DSPARK, M, LONG, N, "--temperature", "0")
        for attempt in range(2):
            r = client.completions.create(model="glm4_moe_mtp", prompt=LONG, max_tokens=N,
                                          temperature=0)
            check(r.choices[0].text == ref["text"],
                  f"long prompt, request {attempt}: {r.choices[0].text!r} != {ref['text']!r}")
        cached = r.usage.prompt_tokens_details.cached_tokens
        check(cached and cached >= 16, f"the repeated prompt reused {cached} tokens")
        print(f"repeated prompt: {cached} of {r.usage.prompt_tokens} prompt tokens reused")


if __name__ == "__main__":
    run_test(main)
