"""Structured output through dspark serve (the official `openai` client), on a server without
drafting, with the target drafting for itself and with the DFlash fixture:
  - 100 greedy requests over 10 JSON schemas (chat and completions, response_format json_schema):
    every response that ends (finish_reason "stop") is JSON that the `jsonschema` package
    validates against its schema; one cut by max_tokens says "length"; the texts are identical on
    the three servers (speculation does not change greedy output);
  - response_format json_object gives a JSON object; streamed content equals the non-streamed;
  - a forced tool call (tool_choice naming a function, and "required" with one tool) comes back as
    message.tool_calls in the OpenAI shape, its arguments valid for the function's parameters,
    finish_reason "tool_calls"; streamed as tool_calls deltas;
  - 400s naming the problem: unsupported keywords (with their path), bad response_format shapes,
    tool_choice without tools / naming an unknown function / "required" with several tools.
"""

import json
import os
import tempfile

import jsonschema
import openai

from server_util import Server, args, check, model_with_tools_template

DSPARK, ROOT, MODELS = args()
M = os.path.join(MODELS, "qwen3")
DFLASH = os.path.join(ROOT, "tests/data/drafters/qwen3_dflash")
MAX = 96


def obj(props, required=None, additional=False):
    s = {"type": "object", "properties": props, "required": required or list(props)}
    if not additional:
        s["additionalProperties"] = False
    return s


SCHEMAS = [
    obj({"name": {"type": "string"}, "age": {"type": "integer"}}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"values": {"type": "array", "items": {"type": "integer"}}}),
    obj({"user": obj({"id": {"type": "integer"}, "active": {"type": "boolean"}})}),
    obj({"note": {"type": ["string", "null"]}, "score": {"type": "number"}}),
    obj({"version": {"const": 2}, "ok": {"type": "boolean"}}),
    {"type": "array", "items": {"type": "boolean"}},
    {"enum": ["yes", "no", 1, None]},
    obj({"a": {"type": "integer"}, "b": {"type": "boolean"}}, required=["a"], additional=True),
    obj({"id": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["x", "y"]}},
         "meta": {"type": "object"}}, required=["id"]),
]
PROMPTS = ["Reply in JSON.", "The cat sat on the mat.", "List three numbers:", "Hello",
           "Describe a user account.", "A JSON document:", "Is it true?", "Numbers: 1, 2, 3",
           "Give me a color", "Once upon a time"]


def rf(i):
    return {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": SCHEMAS[i],
                                                   "strict": True}}


def validate(text, schema, what):
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        check(False, f"{what}: not JSON ({e}): {text!r}")
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        check(False, f"{what}: invalid for its schema ({e.message}): {text!r}")


def run_requests(client):
    """The 100 requests: (text, finish_reason) each; validity checked here."""
    out = []
    ended = 0
    for k in range(100):
        i, p = k % len(SCHEMAS), PROMPTS[k // len(SCHEMAS)]
        what = f"request {k} (schema {i}, prompt {p!r})"
        if k % 2 == 0:
            r = client.chat.completions.create(model="qwen3", messages=[{"role": "user",
                                                                         "content": p}],
                                               max_tokens=MAX, temperature=0,
                                               response_format=rf(i))
            text, reason = r.choices[0].message.content, r.choices[0].finish_reason
        else:
            r = client.completions.create(model="qwen3", prompt=p, max_tokens=MAX, temperature=0,
                                          extra_body={"response_format": rf(i)})
            text, reason = r.choices[0].text, r.choices[0].finish_reason
        check(reason in ("stop", "length"), f"{what}: finish_reason {reason}")
        if reason == "stop":
            ended += 1
            validate(text, SCHEMAS[i], what)
        else:
            check(r.usage.completion_tokens == MAX, f"{what}: length with {r.usage}")
        out.append((text, reason))
    return out, ended


def json_object_checks(client):
    msgs = [{"role": "user", "content": "Say something as JSON."}]
    r = client.chat.completions.create(model="qwen3", messages=msgs, max_tokens=MAX,
                                       temperature=0, response_format={"type": "json_object"})
    text, reason = r.choices[0].message.content, r.choices[0].finish_reason
    if reason == "stop":
        check(isinstance(json.loads(text), dict), f"json_object: {text!r}")
    check(text.lstrip().startswith("{"), f"json_object: {text!r}")
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="qwen3", messages=msgs, max_tokens=MAX, temperature=0,
        response_format={"type": "json_object"}, stream=True) if c.choices)
    check(streamed == text, f"json_object stream: {streamed!r} vs {text!r}")
    return text


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": obj({"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}})}},
    {"type": "function", "function": {"name": "noop"}}]


def tool_checks(client):
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    calls = []
    for tools, choice, name in ((TOOLS, {"type": "function", "function": {"name": "get_weather"}},
                                 "get_weather"), (TOOLS[1:], "required", "noop")):
        r = client.chat.completions.create(model="qwen3", messages=msgs, max_tokens=MAX,
                                           temperature=0, tools=tools, tool_choice=choice)
        c = r.choices[0]
        check(c.message.content is None, f"{name}: content {c.message.content!r}")
        check(len(c.message.tool_calls) == 1, f"{name}: {c.message}")
        call = c.message.tool_calls[0]
        check(call.type == "function" and call.function.name == name and call.id, f"{call}")
        params = next(t["function"].get("parameters", {"type": "object",
                                                       "additionalProperties": False})
                      for t in tools if t["function"]["name"] == name)
        check(c.finish_reason in ("tool_calls", "length"), f"{name}: {c.finish_reason}")
        if c.finish_reason == "tool_calls":
            validate(call.function.arguments, params, f"tool {name}")
        if name == "noop":
            check(json.loads(call.function.arguments) == {} and c.finish_reason == "tool_calls",
                  f"noop: {call}")
        # Streamed: a tool_calls delta with the id and name, then argument pieces.
        args_, names, reasons = "", [], []
        for ch in client.chat.completions.create(model="qwen3", messages=msgs, max_tokens=MAX,
                                                 temperature=0, tools=tools, tool_choice=choice,
                                                 stream=True):
            if not ch.choices:
                continue
            d = ch.choices[0].delta
            for tc in d.tool_calls or []:
                if tc.function and tc.function.name:
                    names.append(tc.function.name)
                args_ += (tc.function.arguments or "") if tc.function else ""
            if ch.choices[0].finish_reason:
                reasons.append(ch.choices[0].finish_reason)
        check(names == [name] and args_ == call.function.arguments and
              reasons == [c.finish_reason], f"{name} stream: {names} {args_!r} {reasons}")
        calls.append(call.function.arguments)
    return calls


def expect_400(client, needle, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    try:
        client.chat.completions.create(model="qwen3", max_tokens=4, **kw)
    except openai.BadRequestError as e:
        check(needle in str(e), f"400 without {needle!r}: {e}")
        return
    check(False, f"no 400 for {kw}")


def bad_input_checks(client):
    def schema(s):
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}
    expect_400(client, '"pattern"', response_format=schema({"type": "string", "pattern": "a"}))
    expect_400(client, "#/properties/a",
               response_format=schema(obj({"a": {"type": "integer", "minimum": 0}})))
    expect_400(client, '"$ref"', response_format=schema({"$ref": "#/defs/x"}))
    expect_400(client, '"anyOf"', response_format=schema({"anyOf": [{"type": "string"}]}))
    expect_400(client, "unknown type", response_format=schema({"type": "strange"}))
    expect_400(client, "response_format", response_format={"type": "xml"})
    expect_400(client, "json_schema.name", response_format={"type": "json_schema",
                                                            "json_schema": {"schema": {}}})
    expect_400(client, "tools", tool_choice="required")
    expect_400(client, "exactly one tool", tools=TOOLS, tool_choice="required")
    expect_400(client, "no tool is named", tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": "nope"}})


def main():
    with tempfile.TemporaryDirectory() as d:
        # The fixture's own template has no tools.
        run_servers(model_with_tools_template(
            M, d, "{%- if tools %}{{- 'Tools: ' + tools | tojson + '\\n' }}{%- endif %}"))


def run_servers(model):
    results = []
    for draft in (["--draft", "none"], ["--draft", "model:" + M], ["--draft", DFLASH]):
        with Server(DSPARK, model, *draft, "--served-model-name", "qwen3") as srv:
            client = srv.client()
            outs, ended = run_requests(client)
            check(ended >= 50, f"{draft}: only {ended} of 100 documents ended within {MAX}")
            results.append((draft[1], outs, json_object_checks(client), tool_checks(client)))
            if draft[1] == "none":
                bad_input_checks(client)
            print(f"{draft[1]}: {ended}/100 complete and valid")
    base = results[0]
    for name, outs, obj_text, calls in results[1:]:
        for k, (a, b) in enumerate(zip(outs, base[1])):
            check(a == b, f"{name}: request {k} differs from plain decoding: {a} vs {b}")
        check(obj_text == base[2] and calls == base[3], f"{name}: json_object / tools differ")


if __name__ == "__main__":
    from server_util import run_test
    run_test(main)
