// Chat templates rendered byte for byte like transformers: every case of
// tests/data/chat_templates/goldens.json (written by tools/chat_template_goldens.py with
// transformers' apply_chat_template) for Qwen3, Llama 3.1 (the asset's template and Meta's
// tool-calling one), Gemma 3, DeepSeek-V3 and Llama 4, loaded from the fixture's
// tokenizer_config.json; cases where transformers raises must throw invalid_input (with exactly
// raise_exception's message). The `jinja` section checks the template engine construct by
// construct against jinja2 in transformers' chat-template environment.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/chat_template.h"
#include "dspark/io/jinja_eval.h"

namespace dspark {
namespace {

using OJson = nlohmann::ordered_json;

const OJson& goldens() {
  static const OJson g = [] {
    std::ifstream in(test::data_dir() / "chat_templates" / "goldens.json");
    EXPECT_TRUE(in.good()) << "missing tests/data/chat_templates/goldens.json";
    return OJson::parse(in);
  }();
  return g;
}

const OJson& template_goldens(const std::string& name) {
  for (const auto& t : goldens()["templates"])
    if (t["name"] == name) return t;
  static const OJson none;
  ADD_FAILURE() << "no goldens for template " << name;
  return none;
}

// Where two renders first differ, with some context, for readable failures.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) +
         "\n  got:  " + OJson(got.substr(from, 120)).dump() +
         "\n  want: " + OJson(want.substr(from, 120)).dump();
}

struct Tally {
  int passed = 0;
  int total = 0;
};

Tally run_template(const std::string& name) {
  const OJson& t = template_goldens(name);
  Tally tally;
  if (t.is_null()) return tally;
  ChatTemplate tmpl = ChatTemplate::from_tokenizer_config(test::data_dir() / "chat_templates" /
                                                          t["fixture"].get<std::string>());
  EXPECT_TRUE(tmpl.has_template());
  for (const auto& c : t["cases"]) {
    const std::string case_name = c["name"].get<std::string>();
    SCOPED_TRACE(name + " / " + case_name);
    ++tally.total;
    bool add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (c.contains("expected")) {
      try {
        std::string got = tmpl.render_ordered(c["messages"], add_generation_prompt, c["extra"]);
        const std::string want = c["expected"].get<std::string>();
        EXPECT_EQ(got, want) << first_difference(got, want);
        tally.passed += got == want;
      } catch (const Error& e) {
        ADD_FAILURE() << "threw: " << e.detailed();
      }
      continue;
    }
    const std::string error_type = c["error_type"].get<std::string>();
    try {
      std::string got = tmpl.render_ordered(c["messages"], add_generation_prompt, c["extra"]);
      ADD_FAILURE() << "expected " << error_type << " \"" << c["error"].get<std::string>()
                    << "\", rendered " << OJson(got).dump();
    } catch (const Error& e) {
      bool ok = e.kind() == ErrorKind::invalid_input;
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.detailed();
      if (error_type == "TemplateError") {
        // raise_exception(message): exactly the template's message.
        EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
        ok = ok && std::string(e.what()) == c["error"].get<std::string>();
      }
      tally.passed += ok;
    }
  }
  std::printf("[chat template goldens] %-15s %d/%d cases match transformers\n", name.c_str(),
              tally.passed, tally.total);
  return tally;
}

TEST(ChatTemplateGolden, Qwen3) {
  Tally t = run_template("qwen3");
  EXPECT_GE(t.total, 12);
  EXPECT_EQ(t.passed, t.total);
}

TEST(ChatTemplateGolden, Llama31) {
  Tally t = run_template("llama3_1");
  EXPECT_GE(t.total, 12);
  EXPECT_EQ(t.passed, t.total);
}

TEST(ChatTemplateGolden, Llama31Tools) {
  Tally t = run_template("llama3_1_tools");
  EXPECT_GE(t.total, 12);
  EXPECT_EQ(t.passed, t.total);
}

TEST(ChatTemplateGolden, Gemma3) {
  Tally t = run_template("gemma3");
  EXPECT_GE(t.total, 12);
  EXPECT_EQ(t.passed, t.total);
}

TEST(ChatTemplateGolden, DeepSeekV3) {
  Tally t = run_template("deepseek_v3");
  EXPECT_GE(t.total, 12);
  EXPECT_EQ(t.passed, t.total);
}

TEST(ChatTemplateGolden, Llama4) {
  Tally t = run_template("llama4");
  EXPECT_GE(t.total, 12);
  EXPECT_EQ(t.passed, t.total);
}

TEST(ChatTemplateGolden, AllTemplatesCovered) {
  std::map<std::string, bool> expected = {{"qwen3", false},          {"llama3_1", false},
                                          {"llama3_1_tools", false}, {"gemma3", false},
                                          {"deepseek_v3", false},    {"llama4", false}};
  for (const auto& t : goldens()["templates"]) {
    auto it = expected.find(t["name"].get<std::string>());
    ASSERT_NE(it, expected.end()) << "goldens for an untested template " << t["name"];
    it->second = true;
  }
  for (const auto& [name, seen] : expected) EXPECT_TRUE(seen) << name;
}

// Each Jinja snippet rendered in transformers' environment (jinja2 with trim_blocks and
// lstrip_blocks, transformers' tojson) with the same variables.
TEST(ChatTemplateGolden, JinjaSnippets) {
  const OJson& snippets = goldens()["jinja"];
  ASSERT_GE(snippets.size(), 50u);
  std::vector<std::pair<std::string, jinja::Value>> vars;
  for (const auto& [k, x] : goldens()["jinja_vars"].items())
    vars.emplace_back(k, jinja::from_json(x));
  int passed = 0;
  for (const auto& c : snippets) {
    const std::string source = c["template"].get<std::string>();
    SCOPED_TRACE(source);
    try {
      auto tree = jinja::parse_template(source);
      std::string got = jinja::render(*tree, vars, jinja::GlobalOptions{});
      if (c.contains("expected")) {
        EXPECT_EQ(got, c["expected"].get<std::string>());
        passed += got == c["expected"].get<std::string>();
      } else {
        ADD_FAILURE() << "expected an error (" << c["error"].get<std::string>() << "), rendered "
                      << OJson(got).dump();
      }
    } catch (const Error& e) {
      if (c.contains("expected")) {
        ADD_FAILURE() << "threw " << e.detailed();
        continue;
      }
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.detailed();
      const std::string want = c["error"].get<std::string>();
      if (want.rfind("TemplateError: ", 0) == 0) {
        EXPECT_EQ(std::string(e.what()), want.substr(15));
      }
      passed += e.kind() == ErrorKind::invalid_input;
    }
  }
  std::printf("[chat template goldens] jinja snippets  %d/%zu match jinja2\n", passed,
              snippets.size());
}

}  // namespace
}  // namespace dspark
