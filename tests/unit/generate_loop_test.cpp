// engine/generate: stop strings (unit), EOS / stop / max_tokens on a fixture model with a fake
// detokenizer whose text is independent of any tokenizer, streaming, seeded sampling.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/stop.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/model.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;

// ---- StopStringMatcher -------------------------------------------------------------------------

std::string feed(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  return out + m.flush();
}

TEST(StopStringMatcher, HoldsBackPartialMatchesAndDropsTheStop) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc S"), "abc ");  // "S" might start STOP
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");  // not a stop after all
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("yy ST"), "yy ");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.push("later"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringMatcher, EarliestOfSeveralAndFlush) {
  StopStringMatcher a({"world", "lo w"});
  EXPECT_EQ(feed(a, {"hel", "lo wor", "ld"}), "hel");
  EXPECT_EQ(a.matched(), "lo w");
  StopStringMatcher b({"zz"});
  EXPECT_EQ(feed(b, {"a", "z"}), "az");  // the held-back "z" is released at the end
  EXPECT_FALSE(b.stopped());
  StopStringMatcher c({"\n\n"});
  EXPECT_EQ(feed(c, {"line\n", "\nnext"}), "line");
  EXPECT_THROW(StopStringMatcher({""}), Error);
}

// ---- generate on a fixture ---------------------------------------------------------------------

// "[id]" per token: a text stream whose content is known independently of any tokenizer.
class BracketDetokenizer : public Detokenizer {
 public:
  std::string push(int32_t token) override { return fmt::format("[{}]", token); }
  std::string flush() override { return ""; }
};

class GenerateOnFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::golden_models_dir() / "llama3";
    if (!fs::exists(dir_)) GTEST_SKIP() << "no fixtures";
    model_ = load_model(dir_, Device::cpu(), DType::f32);
    const SafeTensors g = SafeTensors::open(dir_ / "goldens.safetensors");
    prompt_ = to_vector<int32_t>(g.get("p1.tokens"));
    greedy_ = to_vector<int32_t>(g.get("p1.greedy"));
  }
  fs::path dir_;
  Context ctx_{Device::cpu()};
  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_, greedy_;
};

TEST_F(GenerateOnFixture, MaxTokensAndStreaming) {
  GenerateOptions o;
  o.max_tokens = 5;
  BracketDetokenizer detok;
  std::string streamed;
  const GenerateResult r =
      generate(*model_, ctx_, prompt_, o, &detok, [&](std::string_view s) { streamed += s; });
  EXPECT_EQ(r.tokens, std::vector<int32_t>(greedy_.begin(), greedy_.begin() + 5));
  EXPECT_EQ(r.n_generated, 5);
  EXPECT_EQ(r.finish_reason, FinishReason::length);
  std::string expected;
  for (int i = 0; i < 5; ++i) expected += fmt::format("[{}]", greedy_[static_cast<size_t>(i)]);
  EXPECT_EQ(r.text, expected);
  EXPECT_EQ(streamed, expected);
  EXPECT_GT(r.timings.total_ms, 0.0);
  EXPECT_GE(r.timings.total_ms + 1e-9, r.timings.prefill_ms + r.timings.decode_ms - 1e-6);

  o.max_tokens = 0;
  const GenerateResult none = generate(*model_, ctx_, prompt_, o, &detok);
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(none.text, "");
}

TEST_F(GenerateOnFixture, EosEndsGenerationAndIsNotText) {
  const size_t k = 6;
  const int32_t eos = greedy_[k];
  const size_t first =
      static_cast<size_t>(std::find(greedy_.begin(), greedy_.end(), eos) - greedy_.begin());
  GenerateOptions o;
  o.max_tokens = 32;
  o.eos_token_ids = {eos};
  BracketDetokenizer detok;
  const GenerateResult r = generate(*model_, ctx_, prompt_, o, &detok);
  EXPECT_EQ(r.finish_reason, FinishReason::eos);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(greedy_.begin(), greedy_.begin() + first + 1));
  EXPECT_EQ(r.text.find(fmt::format("[{}]", eos)), std::string::npos);
}

TEST_F(GenerateOnFixture, StopStringAcrossTokens) {
  // The full greedy text, computed independently; a stop string straddling two tokens' pieces.
  std::string full;
  std::vector<size_t> piece_end;
  for (int32_t t : greedy_) {
    full += fmt::format("[{}]", t);
    piece_end.push_back(full.size());
  }
  const std::string stop = fmt::format("][{}][", greedy_[10]);
  const size_t pos = full.find(stop);
  ASSERT_NE(pos, std::string::npos);
  size_t n_tokens = 0;
  while (piece_end[n_tokens] < pos + stop.size()) ++n_tokens;
  ++n_tokens;  // the token whose piece completes the stop string is generated

  GenerateOptions o;
  o.max_tokens = 32;
  o.stop = {stop, "never appears"};
  BracketDetokenizer detok;
  std::string streamed;
  const GenerateResult r =
      generate(*model_, ctx_, prompt_, o, &detok, [&](std::string_view s) { streamed += s; });
  EXPECT_EQ(r.finish_reason, FinishReason::stop);
  EXPECT_EQ(r.stop_matched, stop);
  EXPECT_EQ(r.text, full.substr(0, pos));
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.tokens,
            std::vector<int32_t>(greedy_.begin(), greedy_.begin() + static_cast<long>(n_tokens)));
  // Stop strings need text.
  EXPECT_THROW(generate(*model_, ctx_, prompt_, o, nullptr), Error);
}

TEST_F(GenerateOnFixture, SeededSampling) {
  GenerateOptions o;
  o.max_tokens = 16;
  o.sampling.temperature = 1.0f;
  o.sampling.top_k = 1;  // top-k 1 at any temperature is the argmax
  EXPECT_EQ(generate(*model_, ctx_, prompt_, o).tokens,
            std::vector<int32_t>(greedy_.begin(), greedy_.begin() + 16));

  o.sampling.top_k = 0;
  o.sampling.temperature = 1.5f;
  o.seed = 1234;
  const auto a = generate(*model_, ctx_, prompt_, o).tokens;
  const auto b = generate(*model_, ctx_, prompt_, o).tokens;
  EXPECT_EQ(a, b);
  int differ = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    o.seed = seed;
    differ += generate(*model_, ctx_, prompt_, o).tokens != a ? 1 : 0;
  }
  EXPECT_GE(differ, 3);  // at T = 1.5 a 16-token path is very unlikely to repeat
}

TEST_F(GenerateOnFixture, BadOptionsAreInvalidInput) {
  GenerateOptions o;
  o.max_tokens = -1;
  EXPECT_THROW(generate(*model_, ctx_, prompt_, o), Error);
  o.max_tokens = 4;
  o.sampling.top_p = 2.0f;
  EXPECT_THROW(generate(*model_, ctx_, prompt_, o), Error);
  o.sampling.top_p = 1.0f;
  EXPECT_THROW(generate(*model_, ctx_, std::vector<int32_t>{}, o), Error);
  EXPECT_THROW(generate(*model_, ctx_, std::vector<int32_t>{model_->config().vocab_size}, o),
               Error);
}

}  // namespace
}  // namespace dspark
