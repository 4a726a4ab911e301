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
#include "dspark/ops/token_mask.h"

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
  std::vector<uint32_t> allowed(vocab.size() / 32 + 2, ~0u);  // a spare word: zeroed too
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
          ASSERT_EQ(((allowed[id / 32] >> (id % 32)) & 1u) != 0, want)
              << "token '" << vocab[id] << "'";
          if (want) ok.push_back(static_cast<int32_t>(id));
        }
        EXPECT_EQ(allowed.back(), 0u);
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

bool bit(std::span<const uint32_t> mask, int t) {
  return ((mask[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) != 0;
}

TEST(JsonMask, MasksEosAndIdsPastTheVocabularyAndCaches) {
  const TokenVocab tv(std::vector<std::string>{"{", "}", "\"a\":1", "x", "", "\"", "b"});
  JsonConstraint c{JsonSchema::any_object(), nullptr, {4}};
  c.vocab = std::make_shared<TokenVocab>(tv);
  JsonMaskCache cache(2);
  JsonMatcher m(&c.schema);
  // Start: "{" only; EOS (4, incomplete) and 40 (past the tokenizer's 7 tokens) masked.
  std::vector<uint32_t> start(cache.mask(c, 41, m).begin(), cache.mask(c, 41, m).end());
  ASSERT_EQ(start.size(), 2u);
  for (int t = 0; t < 41; ++t) EXPECT_EQ(bit(start, t), t == 0) << t;
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_EQ(cache.hits(), 1);
  ASSERT_TRUE(m.feed("{}"));
  const auto done_span = cache.mask(c, 41, m);
  const std::vector<uint32_t> done(done_span.begin(), done_span.end());  // the cache reuses it
  for (int t = 0; t < 41; ++t) EXPECT_EQ(bit(done, t), t == 4) << t;     // only EOS
  // Inside a string every character leaves the same state: one miss, then hits.
  JsonMatcher s(&c.schema);
  ASSERT_TRUE(s.feed("{\"k\":\""));
  cache.mask(c, 41, s);
  const int64_t misses = cache.misses();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(s.feed(i % 2 ? "x" : "b"));
    const auto in = cache.mask(c, 41, s);
    EXPECT_TRUE(bit(in, 0) && bit(in, 3) && bit(in, 5) && bit(in, 6) && !bit(in, 2) && !bit(in, 4));
  }
  EXPECT_EQ(cache.misses(), misses);
  // Capacity 2: the start state was evicted (least recently used) and is computed again, equal.
  const auto again = cache.mask(c, 41, JsonMatcher(&c.schema));
  EXPECT_EQ(cache.misses(), misses + 1);
  EXPECT_TRUE(std::equal(again.begin(), again.end(), start.begin(), start.end()));
  // The op turns masked logits into -inf and leaves the others.
  Context ctx(Device::cpu());
  OwnedTensor x =
      OwnedTensor::from_vector(std::vector<float>(41, 1.5f), Shape{1, 41}, Device::cpu());
  apply_token_mask(ctx, x.view(), std::vector<int32_t>{0}, done);
  const std::vector<float> got = to_vector<float>(x.view());
  for (int t = 0; t < 41; ++t) {
    if (t == 4) {
      EXPECT_EQ(got[4], 1.5f);
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
    // The target drafting for itself under the grammar gets drafts accepted, so emitted tokens
    // come from masked verify rows past accepted drafts.
    if (sc.name == "draft-model:self") {
      EXPECT_GT(total.accepted, 0) << sc.name;
    }
  }
}

// Proposes a fixed run's next tokens for every row (at most `max_drafts`), with a token the
// document never accepts (no bytes) at draft position `bad_at` (-1: none); with `vocab` > 0 also
// the draft distributions q, one-hot rows of the drafted tokens.
class OracleSource final : public DraftSource {
 public:
  OracleSource(std::vector<int32_t> run, int32_t bad, int bad_at, int max_drafts, int64_t vocab)
      : run_(std::move(run)), bad_(bad), bad_at_(bad_at), max_(max_drafts), vocab_(vocab) {}
  std::string name() const override { return "oracle"; }
  void begin(Context&, RowId row, std::span<const int32_t>) override { emitted_[row] = 0; }
  void commit(Context&, std::span<const RowUpdate> updates, std::span<const Tensor>) override {
    for (const RowUpdate& u : updates)
      if (u.pending >= 0) emitted_[u.row] += u.n_accepted + 1;
  }
  void propose(Context&, std::span<const ProposeRequest> requests, Proposal& out) override {
    for (const ProposeRequest& q : requests) {
      for (int j = 0; j < std::min(q.max_tokens, max_); ++j) {
        const auto at = static_cast<size_t>(emitted_[q.row] + j);
        out.tokens.push_back(j == bad_at_ ? bad_ : run_[std::min(at, run_.size() - 1)]);
      }
      out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
    }
    if (vocab_ == 0 || out.tokens.empty()) return;
    const auto n = static_cast<int64_t>(out.tokens.size());
    std::vector<float> q(static_cast<size_t>(n * vocab_), 0.0f);
    for (int64_t i = 0; i < n; ++i) q[static_cast<size_t>(i * vocab_ + out.tokens[i])] = 1.0f;
    q_ = OwnedTensor::from_vector(q, Shape{n, vocab_}, Device::cpu());
    out.q = q_.view();
  }
  void release(RowId) override {}

 private:
  std::vector<int32_t> run_;
  int32_t bad_;
  int bad_at_, max_;
  int64_t vocab_;
  std::map<RowId, int> emitted_;  // tokens emitted so far (the pending one included)
  OwnedTensor q_;
};

struct JsonFixture {
  std::unique_ptr<Model> target;
  std::vector<std::string> bytes;
  int32_t eos = 0, bad = -1;  // bad: a token without bytes
  std::shared_ptr<const JsonConstraint> person;
};

JsonFixture json_fixture() {
  JsonFixture f;
  f.target = load_model(qwen3(), Device::cpu(), DType::f32);
  const Tokenizer tok = Tokenizer::from_file(qwen3());
  f.bytes.resize(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    f.bytes[static_cast<size_t>(id)] = tok.token_bytes(id);
    if (f.bytes[static_cast<size_t>(id)].empty() && id != tok.eos_id()) f.bad = id;
  }
  f.eos = tok.eos_id() >= 0 ? tok.eos_id() : 0;
  f.person = std::make_shared<JsonConstraint>(
      JsonConstraint{JsonSchema::compile(kPerson), std::make_shared<TokenVocab>(f.bytes), {f.eos}});
  return f;
}

TEST(JsonEngine, DraftsTheDocumentRejectsAreCut) {
  if (!std::filesystem::exists(qwen3() / "config.json")) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  const JsonFixture f = json_fixture();
  ASSERT_GE(f.bad, 0) << "the fixture's vocabulary has no token without bytes";
  GenerateOptions o;
  o.max_tokens = 30;
  o.eos_token_ids = {f.eos};
  o.json = f.person;
  const std::vector<RequestInput> reqs = {RequestInput{{5, 17, 99, 3, 250}, o, nullptr, {}}};
  SpecConfig cfg;
  cfg.gamma = 4;
  const auto plain = generate_speculative(*f.target, ctx, nullptr, reqs, cfg);
  OracleSource source(plain[0].result.tokens, f.bad, 2, 4, 0);
  const auto out = generate_speculative(*f.target, ctx, &source, reqs, cfg);
  EXPECT_EQ(out[0].result.tokens, plain[0].result.tokens);
  const SpecTelemetry& t = out[0].spec;
  EXPECT_GT(t.drafted, 0);
  EXPECT_EQ(t.accepted, t.drafted);  // the oracle's drafts are right until the cut
  for (size_t j = 2; j < t.drafted_at.size(); ++j) EXPECT_EQ(t.drafted_at[j], 0) << j;
}

// Sampled drafts with their q rows: cutting row 0's drafts at position 2 moves row 1's q rows
// up; the rounds must equal those of a source that proposes the same drafts without the cut
// token (same tokens, same q rows in place), seed for seed (rejection sampling reads q).
TEST(JsonEngine, CutDraftsKeepTheirDraftDistributions) {
  if (!std::filesystem::exists(qwen3() / "config.json")) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  const JsonFixture f = json_fixture();
  ASSERT_GE(f.bad, 0);
  GenerateOptions o;
  o.max_tokens = 24;
  o.eos_token_ids = {f.eos};
  o.json = f.person;
  o.sampling.temperature = 1.0f;
  o.sampling.spec = SpecSampling::rejection;
  std::vector<RequestInput> reqs;
  for (uint64_t seed : {3u, 4u}) {
    o.seed = seed;
    reqs.push_back(RequestInput{{5, 17, 99, 3, static_cast<int32_t>(200 + seed)}, o, nullptr, {}});
  }
  SpecConfig cfg;
  cfg.gamma = 4;
  cfg.draft_policy = DraftPolicy::fixed;
  const auto run = generate_speculative(*f.target, ctx, nullptr, {reqs[0]}, cfg)[0].result.tokens;
  const int64_t vocab = f.target->config().vocab_size;
  OracleSource cut(run, f.bad, 2, 4, vocab), two(run, f.bad, -1, 2, vocab);
  const auto a = generate_speculative(*f.target, ctx, &cut, reqs, cfg);
  const auto b = generate_speculative(*f.target, ctx, &two, reqs, cfg);
  int64_t accepted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(a[i].result.tokens, b[i].result.tokens) << "request " << i;
    EXPECT_EQ(a[i].spec.drafted, b[i].spec.drafted) << "request " << i;
    accepted += a[i].spec.accepted;
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace dspark
