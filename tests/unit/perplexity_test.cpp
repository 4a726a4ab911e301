// engine/perplexity.h: token_nll against a log-softmax written out; perplexity() over the tiny
// golden Llama 3 equals the same sum taken position by position with one forward per prefix
// (each window from an empty cache, its second half scored, BOS first), for one forward per window
// and for windows forwarded in several chunks; the refusals.
#include <gtest/gtest.h>

#include <cmath>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/engine/perplexity.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {

TEST(TokenNll, IsMinusTheLogSoftmax) {
  const std::vector<float> row = {1.5f, -2.0f, 0.25f, 3.0f, 3.0f};
  double z = 0;
  for (float v : row) z += std::exp(static_cast<double>(v));
  for (int t = 0; t < 5; ++t) EXPECT_NEAR(token_nll(row, t), std::log(z) - row[t], 1e-12) << t;
  // Large logits: no overflow.
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(token_nll(big, 1), std::log(2.0), 1e-12);
  EXPECT_THROW(token_nll(row, 5), Error);
}

// The reference: each scored position's logits from a forward of its whole prefix.
double reference_nll_sum(Model& m, Context& ctx, std::vector<int32_t> window, int32_t bos) {
  window[0] = bos;
  double sum = 0;
  const int n = static_cast<int>(window.size());
  for (int i = n / 2; i < n - 1; ++i) {
    const std::vector<int32_t> prefix(window.begin(), window.begin() + i + 1);
    sum +=
        token_nll(test::last_position_logits(m, ctx, prefix), window[static_cast<size_t>(i) + 1]);
  }
  return sum;
}

TEST(Perplexity, EqualsThePositionByPositionSum) {
  std::unique_ptr<Model> m =
      load_model(test::data_dir() / "models" / "llama3", Device::cpu(), DType::f32);
  Context ctx(Device::cpu());
  const int vocab = m->config().vocab_size;
  const std::vector<int32_t> text = test::random_token_ids(vocab, 3 * 12 + 5, 7);
  PerplexityOptions o;
  o.context = 12;
  o.bos = 1;
  double want = 0;
  for (int w = 0; w < 3; ++w) {
    want += reference_nll_sum(*m, ctx, {text.begin() + 12 * w, text.begin() + 12 * (w + 1)}, 1);
  }
  const int scored = 3 * (12 - 1 - 6);
  for (int chunk : {512, 5, 1}) {
    o.forward_chunk = chunk;
    int calls = 0;
    const PerplexityResult r = perplexity(*m, ctx, text, o, [&](int done, int total, double) {
      EXPECT_EQ(done, ++calls);
      EXPECT_EQ(total, 3);
    });
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(r.windows, 3);
    EXPECT_EQ(r.text_tokens, 41);
    EXPECT_EQ(r.scored, scored);
    EXPECT_NEAR(r.mean_nll, want / scored, 1e-5) << "chunk " << chunk;
    EXPECT_NEAR(r.ppl, std::exp(want / scored), 1e-4 * r.ppl) << "chunk " << chunk;
    EXPECT_GT(r.nll_stderr, 0);
    ASSERT_EQ(r.window_ppl.size(), 3u);
  }
  o.max_windows = 2;
  EXPECT_EQ(perplexity(*m, ctx, text, o).windows, 2);
}

TEST(Perplexity, RefusesShortTextsAndContexts) {
  std::unique_ptr<Model> m =
      load_model(test::data_dir() / "models" / "llama3", Device::cpu(), DType::f32);
  Context ctx(Device::cpu());
  const std::vector<int32_t> text = test::random_token_ids(m->config().vocab_size, 10, 3);
  PerplexityOptions o;
  o.context = 16;
  try {
    perplexity(*m, ctx, text, o);
    ADD_FAILURE() << "a text shorter than a window was scored";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
    EXPECT_NE(std::string(e.what()).find("10 tokens"), std::string::npos) << e.what();
  }
  o.context = 3;
  EXPECT_THROW(perplexity(*m, ctx, text, o), Error);
}

}  // namespace
}  // namespace dspark
