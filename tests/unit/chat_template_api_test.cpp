// ChatTemplate beyond the transformers goldens: loading (directory or file, named templates,
// chat_template.jinja, no template), errors (kinds and messages, no crash on hostile templates),
// message normalisation, key order, the pinned clock, concurrency and render_plain_chat.
// Expected strings follow from the documented rules in chat_template.h (and, for the Jinja
// semantics they rely on, from the jinja2 snippets of chat_template_golden_test.cpp).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <ctime>
#include <fstream>
#include <thread>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/chat_template.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;

fs::path fixture(const std::string& name) {
  return test::data_dir() / "chat_templates" / name;
}

using test::TempDir;

// Runs f, which must throw dspark::Error of `kind` with `needle` in its message.
template <typename F>
void expect_error(F f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

Json user(const std::string& text) {
  return {{"role", "user"}, {"content", text}};
}

TEST(ChatTemplateApi, DirectoryAndFileLoadTheSameTemplate) {
  ChatTemplate from_dir = ChatTemplate::from_tokenizer_config(fixture("qwen3"));
  ChatTemplate from_file =
      ChatTemplate::from_tokenizer_config(fixture("qwen3") / "tokenizer_config.json");
  ASSERT_TRUE(from_dir.has_template());
  Json config = Json::parse(std::ifstream(fixture("qwen3") / "tokenizer_config.json"));
  EXPECT_EQ(from_dir.source(), config["chat_template"].get<std::string>());
  Json messages = Json::array({user("Hello")});
  EXPECT_EQ(from_dir.render(messages), from_file.render(messages));
  EXPECT_EQ(from_dir.render(messages),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateApi, SpecialTokensFromConfig) {
  // DeepSeek-V3 stores them as AddedToken objects ({"content": ...}).
  ChatTemplate deepseek = ChatTemplate::from_tokenizer_config(fixture("deepseek_v3"));
  EXPECT_EQ(deepseek.render(Json::array({user("x")}), false),
            "<\xEF\xBD\x9C"
            "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser\xEF\xBD\x9C>x");
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": {"content": "</s>"},
      "pad_token": null, "extra_special_tokens": {"image_token": "<img>"},
      "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ image_token }}|{{ pad_token is defined }}"})");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(dir.path()).render(Json::array({user("x")})),
            "<s>|</s>|<img>|False");
}

TEST(ChatTemplateApi, NamedTemplatesPickDefaultAndToolUse) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "D:{{ messages[0].content }}"},
      {"name": "tool_use", "template": "T:{{ tools|length }}"}]})");
  ChatTemplate t = ChatTemplate::from_tokenizer_config(dir.path());
  EXPECT_EQ(t.source(), "D:{{ messages[0].content }}");
  Json messages = Json::array({user("hi")});
  EXPECT_EQ(t.render(messages), "D:hi");
  EXPECT_EQ(t.render(messages, true, {{"tools", Json::array({Json::object(), Json::object()})}}),
            "T:2");
  EXPECT_EQ(t.render(messages, true, {{"tools", nullptr}}), "D:hi");

  TempDir no_default;
  no_default.write("tokenizer_config.json", R"({"chat_template": [
      {"name": "a", "template": "A"}, {"name": "b", "template": "B"}]})");
  expect_error([&] { ChatTemplate::from_tokenizer_config(no_default.path()); }, ErrorKind::io,
               "none named 'default'");
}

TEST(ChatTemplateApi, ChatTemplateJinjaFileTakesPrecedence) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": "config"})");
  dir.write("chat_template.jinja", "{{ bos_token }}jinja file\n");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(dir.path()).render(Json::array({user("x")})),
            "<s>jinja file");
  TempDir only_jinja;
  only_jinja.write("chat_template.jinja", "{{ messages|length }}");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(only_jinja.path()).render(Json::array({user("x")})),
            "1");
}

TEST(ChatTemplateApi, NoTemplate) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": null})");
  ChatTemplate t = ChatTemplate::from_tokenizer_config(dir.path());
  EXPECT_FALSE(t.has_template());
  EXPECT_EQ(t.source(), "");
  expect_error([&] { t.render(Json::array({user("x")})); }, ErrorKind::unsupported,
               "no chat template");
  EXPECT_FALSE(ChatTemplate().has_template());
}

TEST(ChatTemplateApi, LoadErrorsAreIo) {
  TempDir dir;
  expect_error([&] { ChatTemplate::from_tokenizer_config(dir.path()); }, ErrorKind::io,
               "tokenizer_config.json");
  dir.write("tokenizer_config.json", "{not json");
  expect_error([&] { ChatTemplate::from_tokenizer_config(dir.path()); }, ErrorKind::io,
               "tokenizer_config.json");
  dir.write("tokenizer_config.json", R"({"chat_template": "{% if x %}never closed"})");
  expect_error([&] { ChatTemplate::from_tokenizer_config(dir.path()); }, ErrorKind::io,
               "tokenizer_config.json: chat template line 1");
}

TEST(ChatTemplateApi, SyntaxErrorsNameTheLine) {
  expect_error([] { ChatTemplate::from_string("a\n{{ x"); }, ErrorKind::io, "line 2");
  expect_error([] { ChatTemplate::from_string("{% endfor %}"); }, ErrorKind::io, "unknown tag");
  expect_error([] { ChatTemplate::from_string("\n\n{{ 'abc }}"); }, ErrorKind::io, "line 3");
  expect_error([] { ChatTemplate::from_string("{{ (1 }}"); }, ErrorKind::io, "line 1");
  expect_error([] { ChatTemplate::from_string("{% for x in y %}{% endif %}"); }, ErrorKind::io,
               "expected 'endfor' or 'else'");
  expect_error([] { ChatTemplate::from_string("{# never closed"); }, ErrorKind::io, "comment");
  expect_error([] { ChatTemplate::from_string("{% break %}"); }, ErrorKind::io,
               "outside of a loop");
}

TEST(ChatTemplateApi, UnsupportedConstructsAreNamed) {
  expect_error([] { ChatTemplate::from_string("{% extends 'base.html' %}"); },
               ErrorKind::unsupported, "extends");
  expect_error([] { ChatTemplate::from_string("{% include 'x' %}"); }, ErrorKind::unsupported,
               "include");
  expect_error([] { ChatTemplate::from_string("{% call m() %}x{% endcall %}"); },
               ErrorKind::unsupported, "call");
  expect_error([] { ChatTemplate::from_string("{{ x|truncate(3) }}"); }, ErrorKind::unsupported,
               "filter 'truncate'");
  expect_error([] { ChatTemplate::from_string("{{ x is fancy }}"); }, ErrorKind::unsupported,
               "test 'fancy'");
  expect_error([] { ChatTemplate::from_string("{% for x in y recursive %}{% endfor %}"); },
               ErrorKind::unsupported, "recursive");
  ChatTemplate zfill = ChatTemplate::from_string("{{ messages[0].content.zfill(5) }}");
  expect_error([&] { zfill.render(Json::array({user("7")})); }, ErrorKind::unsupported, "zfill");
}

TEST(ChatTemplateApi, HostileTemplatesFailCleanly) {
  Json messages = Json::array({user("x")});
  ChatTemplate recursion =
      ChatTemplate::from_string("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  expect_error([&] { recursion.render(messages); }, ErrorKind::invalid_input, "recursion");
  expect_error(
      [] {
        ChatTemplate::from_string("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') +
                                  " }}");
      },
      ErrorKind::io, "too deep");
  expect_error(
      [] {
        ChatTemplate::from_string(std::string(5000, ' ') + "{% if x %}" + std::string(300, ' ') +
                                  "{{ not not not not x }}");
      },
      ErrorKind::io, "expected 'elif' or 'else' or 'endif'");
  expect_error([] { ChatTemplate::from_string("{{ " + std::string(5000, '[') + " }}"); },
               ErrorKind::io, "");
  ChatTemplate big_range = ChatTemplate::from_string("{% for i in range(10**9) %}{% endfor %}");
  expect_error([&] { big_range.render(messages); }, ErrorKind::invalid_input, "Range too big");
  ChatTemplate mutate = ChatTemplate::from_string("{{ messages.append(1) }}");
  expect_error([&] { mutate.render(messages); }, ErrorKind::invalid_input, "unsafe");
}

TEST(ChatTemplateApi, RaiseExceptionKeepsTheMessage) {
  ChatTemplate t =
      ChatTemplate::from_string("ok{{ raise_exception('Bad roles: ' ~ messages|length) }}");
  try {
    t.render(Json::array({user("a"), user("b")}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
    EXPECT_STREQ(e.what(), "Bad roles: 2");
  }
  // Other errors the template hits name the line.
  ChatTemplate undefined = ChatTemplate::from_string("\n{{ messages[0].missing + 'x' }}");
  expect_error([&] { undefined.render(Json::array({user("a")})); }, ErrorKind::invalid_input,
               "chat template line 2: 'dict object' has no attribute 'missing'");
}

TEST(ChatTemplateApi, InvalidMessages) {
  ChatTemplate t = ChatTemplate::from_string("{{ messages|length }}");
  expect_error([&] { t.render(Json::object()); }, ErrorKind::invalid_input, "array");
  expect_error([&] { t.render(Json::array()); }, ErrorKind::invalid_input, "empty");
  expect_error([&] { t.render(Json::array({"text"})); }, ErrorKind::invalid_input, "messages[0]");
  Json image = {{"role", "user"},
                {"content", Json::array({{{"type", "text"}, {"text", "look"}},
                                         {{"type", "image_url"}, {"image_url", "x"}}})}};
  expect_error([&] { t.render(Json::array({image})); }, ErrorKind::invalid_input, "image_url");
  expect_error(
      [&] {
        t.render(Json::array({user("x")}), true, {{"messages", Json::array()}});
      },
      ErrorKind::invalid_input, "messages");
  expect_error([&] { t.render(Json::array({user("x")}), true, Json::array()); },
               ErrorKind::invalid_input, "object");
}

TEST(ChatTemplateApi, ContentPartsJoinedUnlessTheTemplateLoopsOverThem) {
  Json parts = {{"role", "user"},
                {"content", Json::array({{{"type", "text"}, {"text", "a"}},
                                         {{"type", "text"}, {"text", "b"}}})}};
  ChatTemplate plain =
      ChatTemplate::from_string("{% for m in messages %}[{{ m.content }}]{% endfor %}");
  EXPECT_EQ(plain.render(Json::array({parts, user("c")})), "[a\nb][c]");
  ChatTemplate typed = ChatTemplate::from_string(
      "{% for m in messages %}{% if m['content'] is string %}({{ m['content'] }}){% else %}"
      "{% for p in m['content'] %}<{{ p.text }}>{% endfor %}{% endif %}{% endfor %}");
  EXPECT_EQ(typed.render(Json::array({parts, user("c")})), "<a><b>(c)");
}

TEST(ChatTemplateApi, NullKeysDroppedAndReasoningAliased) {
  ChatTemplate t = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.content is defined }},{{ m.tool_calls is defined }},"
      "{{ m.thinking }},{{ m.reasoning_content }},{{ m|list|join('+') }};{% endfor %}");
  OJson messages = OJson::parse(R"([
      {"role": "assistant", "content": null, "tool_calls": null},
      {"role": "assistant", "reasoning": "R", "content": "c"}])");
  EXPECT_EQ(t.render_ordered(messages),
            "False,False,,,role;True,False,R,R,thinking+role+reasoning+content+reasoning_content;");
}

TEST(ChatTemplateApi, RenderOrderedKeepsKeyOrder) {
  ChatTemplate t = ChatTemplate::from_string("{{ tools[0]|tojson }}");
  OJson tool =
      OJson::parse(R"({"type": "function", "function": {"name": "f", "description": "d"}})");
  OJson extra = {{"tools", OJson::array({tool})}};
  OJson messages = OJson::array({OJson{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(t.render_ordered(messages, true, extra),
            R"({"type": "function", "function": {"name": "f", "description": "d"}})");
  // nlohmann::json sorts keys, so render() dumps them sorted.
  EXPECT_EQ(t.render(Json(messages), true, Json(extra)),
            R"({"function": {"description": "d", "name": "f"}, "type": "function"})");
}

TEST(ChatTemplateApi, TemplateVariables) {
  ChatTemplate t = ChatTemplate::from_string(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|"
      "{{ enable_thinking }}",
      "<s>", "</s>");
  EXPECT_EQ(t.render(Json::array({user("x")}), false, {{"enable_thinking", false}}),
            "<s>|</s>|False|None|None|False");
  ChatTemplate no_tokens = ChatTemplate::from_string("{{ bos_token is defined }}{{ bos_token }}");
  EXPECT_EQ(no_tokens.render(Json::array({user("x")})), "False");
}

TEST(ChatTemplateApi, StrftimeNow) {
  ChatTemplate t = ChatTemplate::from_string("{{ strftime_now('%d %b %Y %H:%M:%S %A %j %%') }}");
  Json messages = Json::array({user("x")});
  EXPECT_EQ(t.render(messages, true, {{"strftime_now", "2024-07-26T13:05:09"}}),
            "26 Jul 2024 13:05:09 Friday 208 %");
  expect_error(
      [&] {
        t.render(messages, true, {{"strftime_now", "yesterday"}});
      },
      ErrorKind::invalid_input, "YYYY-MM-DD");
  // Unpinned: the local clock.
  ChatTemplate year = ChatTemplate::from_string("{{ strftime_now('%Y') }}");
  auto local_year = [] {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    return std::to_string(tm.tm_year + 1900);
  };
  std::string before = local_year();
  std::string got = year.render(messages);
  std::string after = local_year();
  EXPECT_TRUE(got == before || got == after) << got;
}

TEST(ChatTemplateApi, ConcurrentRendersAgree) {
  ChatTemplate t = ChatTemplate::from_tokenizer_config(fixture("llama3_1_tools"));
  Json messages = Json::array({{{"role", "system"}, {"content", "Be brief."}},
                               user("Hi"),
                               {{"role", "assistant"}, {"content", "Hello."}},
                               user("Bye")});
  const std::string want = t.render(messages);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) mismatches[static_cast<size_t>(i)] += t.render(messages) != want;
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(ChatTemplateApi, PlainChatFallback) {
  Json messages = Json::array({{{"role", "system"}, {"content", "S"}},
                               {{"role", "user"},
                                {"content", Json::array({{{"type", "text"}, {"text", "a"}},
                                                         {{"type", "text"}, {"text", "b"}}})}},
                               {{"role", "assistant"}, {"content", nullptr}}});
  EXPECT_EQ(render_plain_chat(messages, true), "system: S\nuser: a\nb\nassistant: \nassistant: ");
  EXPECT_EQ(render_plain_chat(messages, false), "system: S\nuser: a\nb\nassistant: \n");
  expect_error(
      [] {
        render_plain_chat(Json::array({{{"content", "x"}}}), true);
      },
      ErrorKind::invalid_input, "role");
  expect_error([] { render_plain_chat(Json::object(), true); }, ErrorKind::invalid_input, "array");
}

}  // namespace
}  // namespace dspark
