// Structured output: the schema compiler's refusals, the matcher on documents it must accept and
// reject, token masks against a brute-force reference on a small vocabulary, and on the tiny
// qwen3 fixture (CPU, f32) the engine with a JSON constraint: every greedy output is a complete
// document the matcher accepts and nlohmann parses, identical with and without speculation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "common/lossless.h"
#include "common/test_util.h"
#include "dspark/engine/json_mask.h"
#include "dspark/engine/json_matcher.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/tokenizer.h"
#include "dspark/model/model.h"
#include "dspark/ops/penalties.h"

namespace dspark {
namespace {

using json = nlohmann::json;

bool accepts(const JsonSchema& s, std::string_view text) {
  JsonMatcher m(&s);
  return m.feed(text) && m.complete();
}

bool prefix_ok(const JsonSchema& s, std::string_view text) {
  JsonMatcher m(&s);
  return m.feed(text);
}

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "height": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "kind": {"enum": ["a", "b", 3]},
    "ok": {"type": ["boolean", "null"]},
    "fixed": {"const": {"x": [1, 2]}}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

TEST(JsonSchema, RefusesUnsupportedKeywords) {
  for (const char* text :
       {R"({"type": "string", "pattern": "a+"})", R"({"anyOf": [{"type": "string"}]})",
        R"({"type": "object", "properties": {"a": {"$ref": "#"}}})", R"({"type": "strange"})",
        R"({"type": "object", "required": ["zz"]})", R"({"enum": []})",
        R"({"type": "integer", "enum": ["a"]})", R"({"type": "object",
        "additionalProperties": {"type": "string"}})",
        R"(false)", R"([1])"}) {
    EXPECT_THROW(JsonSchema::compile(json::parse(text)), Error) << text;
  }
  try {
    JsonSchema::compile(json::parse(R"({"type": "object", "properties": {"a": {"minimum": 1}}})"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"minimum\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("#/properties/a"), std::string::npos) << e.what();
  }
}

TEST(JsonMatcher, AcceptsAndRejects) {
  const JsonSchema person = JsonSchema::compile(kPerson);
  for (const char* ok : {R"({"name":"x","age":3})", R"({"age":-10,"name":"\u00e9\n"})",
                         "{ \"name\" : \"é€😀\" , \"age\" : 0 }",
                         R"({"name":"","age":1,"height":-1.5e+3,"tags":["a",""],"kind":3})",
                         R"({"name":"","age":1,"kind":"b","ok":null,"fixed":{"x":[1,2]}})",
                         R"({"name":"","age":1,"ok":true,"tags":[]})"}) {
    EXPECT_TRUE(accepts(person, ok)) << ok;
  }
  for (const char* bad :
       {R"({"name":"x"})", R"({"name":"x","age":3.5})", R"({"name":"x","age":3,"other":1})",
        R"({"name":"x","name":"y","age":1})", R"({"name":"x","age":01})",
        R"({"name":"x","age":1,"kind":"c"})", R"({"name":"x","age":1,"kind":33})",
        R"({"name":"x","age":1,"ok":1})", R"({"name":"a\x","age":1})", R"({"name":"x","age":1,})",
        R"({"name":"x","age":1} )", R"([1])", "{\"name\":\"\x01\",\"age\":1}",
        "{\"name\":\"\xC3\",\"age\":1}", R"({"name":"x","age":1,"fixed":{}})",
        R"({"na\u006de":"x","age":1})"}) {
    EXPECT_FALSE(accepts(person, bad)) << bad;
  }
  EXPECT_TRUE(prefix_ok(person, R"({"name":"x")"));
  EXPECT_FALSE(accepts(person, R"({"name":"x")"));

  const JsonSchema any = JsonSchema::any_object();
  EXPECT_TRUE(accepts(any, R"({"a":[1,{"b":null}],"c":"d","a":2.5e-3})"));
  EXPECT_TRUE(accepts(any, "{}"));
  EXPECT_FALSE(accepts(any, "[]"));
  EXPECT_FALSE(accepts(any, R"({"a":tru})"));
  EXPECT_FALSE(accepts(any, R"({"a":1.})"));
  // Whitespace: at most kMaxJsonWhitespace bytes in a row outside strings.
  EXPECT_TRUE(accepts(any, "{\n  \"a\": 1\n}"));
  EXPECT_FALSE(prefix_ok(any, "{" + std::string(kMaxJsonWhitespace + 1, ' ')));
  EXPECT_TRUE(accepts(any, "{\"a\":\"" + std::string(40, ' ') + "\"}"));
  // Nesting is bounded.
  EXPECT_TRUE(prefix_ok(any, R"({"a":)" + std::string(kMaxJsonNesting - 1, '[')));
  EXPECT_FALSE(prefix_ok(any, R"({"a":)" + std::string(kMaxJsonNesting, '[')));

  // Top-level scalars end at EOS only when complete.
  const JsonSchema num = JsonSchema::compile(json::parse(R"({"type": "number"})"));
  EXPECT_TRUE(accepts(num, "-0.5"));
  EXPECT_FALSE(accepts(num, "-"));
  EXPECT_FALSE(accepts(num, "1e"));
  const JsonSchema lits = JsonSchema::compile(json::parse(R"({"enum": [1, 12, "x"]})"));
  EXPECT_TRUE(accepts(lits, "1"));
  EXPECT_TRUE(accepts(lits, "12"));
  EXPECT_FALSE(accepts(lits, "123"));
  EXPECT_FALSE(accepts(lits, "2"));
}

// allowed_tokens against feeding every token's bytes into a copy of the matcher.
TEST(JsonMatcher, MaskMatchesBruteForce) {
  const std::vector<std::string> alphabet = {
      "{", "}", "[", "]", ",", ":", "\"", " ",  "\n",   "a",    "e", "n", "t", "r", "u", "l",
      "f", "s", "0", "1", "5", "-", ".",  "\\", "\xC3", "\xA9", "x", "g", "h", "k", "d"};
  std::mt19937 gen(7);
  std::vector<std::string> vocab = {""};  // id 0: a special token (no bytes)
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> len(1, 5);
  for (const auto& a : alphabet) vocab.push_back(a);
  const std::vector<std::string> words = {"\"name\"", "\"age\":", "true", "null",
                                          "\":\"",    "\",\"",    "{\"",  "\"}",
                                          "12",       "-0.",      "e+",   "\"kind\":\"a\""};
  for (const auto& w : words) vocab.push_back(w);
  while (vocab.size() < 400) {
    std::string t;
    for (int i = len(gen); i > 0; --i) t += alphabet[pick(gen)];
    vocab.push_back(t);
  }
  const TokenVocab tv(vocab);
  const JsonSchema person = JsonSchema::compile(kPerson);
  const JsonSchema any = JsonSchema::any_object();
  std::vector<uint8_t> allowed;
  int checked = 0, total_allowed = 0;
  for (const JsonSchema* s : {&person, &any}) {
    // Random walks through allowed tokens: masks at every state on the way.
    for (int walk = 0; walk < 30; ++walk) {
      JsonMatcher m(s);
      for (int step = 0; step < 40; ++step) {
        tv.allowed_tokens(m, allowed);
        std::vector<int32_t> ok;
        for (size_t id = 0; id < vocab.size(); ++id) {
          JsonMatcher c = m;
          const bool want = !vocab[id].empty() && c.feed(vocab[id]);
          ASSERT_EQ(allowed[id] != 0, want) << "token '" << vocab[id] << "'";
          if (want) ok.push_back(static_cast<int32_t>(id));
        }
        ++checked;
        total_allowed += static_cast<int>(ok.size());
        if (ok.empty()) break;
        ASSERT_TRUE(
            tv.advance(m, ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(gen)]));
      }
    }
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(total_allowed, checked);  // masks are not trivially empty
}

TEST(JsonMask, MergesWithPenaltiesAndMasksEos) {
  const TokenVocab tv(std::vector<std::string>{"{", "}", "\"a\":1", "x", ""});
  JsonConstraint c{JsonSchema::any_object(), nullptr, {4}};
  c.vocab = std::make_shared<TokenVocab>(tv);
  JsonMatcher m(&c.schema);
  std::vector<PenaltyEntry> out = {{0, 9, 1.0f, 0.0f}, {1, 3, 1.2f, 0.5f}, {1, 0, 1.2f, 0.0f}};
  std::vector<uint8_t> scratch;
  append_json_mask(c, 6, m, 1, 1, out, scratch);
  // Row 1: token 3 masked (edit kept, subtract inf), 0 allowed, 1, 2, 4 (EOS: incomplete), 5
  // (past the tokenizer's vocabulary) masked.
  std::map<int32_t, float> row1;
  for (const auto& e : out)
    if (e.row == 1) row1[e.token] = e.subtract;
  EXPECT_EQ(row1.size(), 6u);
  EXPECT_EQ(row1[0], 0.0f);
  for (int t : {1, 2, 3, 4, 5}) EXPECT_TRUE(std::isinf(row1[t])) << t;
  ASSERT_TRUE(m.feed("{}"));
  out.clear();
  append_json_mask(c, 5, m, 0, 0, out, scratch);
  EXPECT_EQ(out.size(), 4u);  // only EOS (4) stays
  for (const auto& e : out) EXPECT_NE(e.token, 4);
  // The op turns masked logits into -inf and leaves the others.
  Context ctx(Device::cpu());
  OwnedTensor x =
      OwnedTensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, Shape{1, 5}, Device::cpu());
  apply_penalties(ctx, x.view(), out);
  const std::vector<float> got = to_vector<float>(x.view());
  for (int t = 0; t < 5; ++t) {
    if (t == 4) {
      EXPECT_EQ(got[4], 5.0f);
    } else {
      EXPECT_TRUE(std::isinf(got[static_cast<size_t>(t)]) && got[static_cast<size_t>(t)] < 0);
    }
  }
}

// ---- through the engine --------------------------------------------------------------------

std::filesystem::path qwen3() {
  return test::data_dir() / "models" / "qwen3";
}

TEST(JsonEngine, GreedyDocumentsSpeculativeEqualsPlain) {
  if (!std::filesystem::exists(qwen3() / "config.json")) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  auto target = load_model(qwen3(), Device::cpu(), DType::f32);
  const Tokenizer tok = Tokenizer::from_file(qwen3());
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    bytes[static_cast<size_t>(id)] = tok.token_bytes(id);
  auto vocab = std::make_shared<TokenVocab>(bytes);
  const int32_t eos = tok.eos_id() >= 0 ? tok.eos_id() : 0;
  std::vector<std::shared_ptr<const JsonConstraint>> constraints;
  constraints.push_back(
      std::make_shared<JsonConstraint>(JsonConstraint{JsonSchema::compile(kPerson), vocab, {eos}}));
  constraints.push_back(std::make_shared<JsonConstraint>(JsonConstraint{
      JsonSchema::compile(json::parse(
          R"({"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":[1,2]}},
              "required":["ok","n"],"additionalProperties":false})")),
      vocab,
      {eos}}));
  constraints.push_back(
      std::make_shared<JsonConstraint>(JsonConstraint{JsonSchema::any_object(), vocab, {eos}}));
  std::vector<RequestInput> reqs;
  std::mt19937 gen(3);
  std::uniform_int_distribution<int32_t> pick(3, 300);
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(5 + 3 * i));
    for (auto& t : prompt) t = pick(gen);
    GenerateOptions o;
    o.max_tokens = 40;
    o.eos_token_ids = {eos};
    o.json = constraints[static_cast<size_t>(i) % constraints.size()];
    reqs.push_back(RequestInput{prompt, o, nullptr, {}});
  }
  SpecConfig cfg;
  cfg.gamma = 4;
  const auto plain = generate_speculative(*target, ctx, nullptr, reqs, cfg);
  int complete = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const GenerateResult& r = plain[i].result;
    JsonMatcher m(&reqs[i].options.json->schema);
    std::string text;
    for (const int32_t t : r.tokens)
      if (t != eos) text += bytes[static_cast<size_t>(t)];
    ASSERT_TRUE(m.feed(text)) << text;
    if (r.finish_reason == FinishReason::eos) {
      ++complete;
      EXPECT_TRUE(m.complete()) << text;
      EXPECT_TRUE(json::accept(text)) << text;
    } else {
      EXPECT_EQ(r.finish_reason, FinishReason::length);
      EXPECT_EQ(r.n_generated, 40);
    }
  }
  EXPECT_GE(complete, 2);
  const std::vector<test::NamedSource> sources =
      test::self_ngram_fixture_sources("qwen3", "qwen3_dflash");
  for (const auto& sc : sources) {
    auto source = sc.make(*target);
    const auto out = generate_speculative(*target, ctx, source.get(), reqs, cfg);
    SpecTelemetry total;
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].result.tokens, plain[i].result.tokens) << sc.name << " request " << i;
      total.merge(out[i].spec);
    }
    // Drafts are proposed without the mask; the target drafting for itself still gets some
    // accepted, so emitted tokens come from masked verify rows past accepted drafts.
    if (sc.name == "draft-model:self") {
      EXPECT_GT(total.accepted, 0) << sc.name;
    }
  }
}

}  // namespace
}  // namespace dspark
