// Every fixture model on the CPU in f32 against Hugging Face goldens (tolerance 1e-4 relative RMS
// for logits, taps and final hidden states; greedy continuations token-identical).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>

#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

constexpr double kTolF32 = 1e-4;

class ModelGoldenCpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::golden_models_dir())) {
      GTEST_SKIP() << "no fixtures in " << test::golden_models_dir()
                   << " (tools/goldens/make_goldens.py)";
    }
    dir_ = test::golden_models_dir() / GetParam();
    ASSERT_TRUE(std::filesystem::exists(dir_)) << dir_;
  }
  std::filesystem::path dir_;
};

TEST_P(ModelGoldenCpu, LogitsTapsFinalHiddenAndGreedy) {
  Context ctx(Device::cpu());
  auto model = load_model(dir_, Device::cpu(), DType::f32);
  const test::GoldenSet g = test::load_golden_set(dir_);
  ASSERT_EQ(g.prompts.size(), 3u);
  test::WorstErrors worst;
  for (int p = 0; p < static_cast<int>(g.prompts.size()); ++p) {
    test::check_single_prompt_forward(*model, ctx, g, p, kTolF32, worst);
    test::check_greedy_generate(*model, ctx, g, p);
  }
  std::cout << "[" << GetParam() << " cpu f32] worst rel RMS: " << worst.str() << "\n";
}

TEST_P(ModelGoldenCpu, BatchedAndChunkedMatchPerPrompt) {
  Context ctx(Device::cpu());
  auto model = load_model(dir_, Device::cpu(), DType::f32);
  const test::GoldenSet g = test::load_golden_set(dir_);
  test::WorstErrors worst;
  // All prompts whole, as 3 rows of one batch.
  test::check_batched(*model, ctx, g, {1 << 20}, kTolF32, worst, "batched");
  // Chunked prefill with ragged chunk sizes per row (rows finish at different steps).
  test::check_batched(*model, ctx, g, {3, 7, 16}, kTolF32, worst, "chunked");
  std::cout << "[" << GetParam() << " cpu f32] worst rel RMS: " << worst.str() << "\n";
}

// (Test names carry the index; gtest prints the fixture name as the parameter.)
INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGoldenCpu, ::testing::ValuesIn(test::golden_model_names()));

TEST(ModelGoldenCpu, ShardedEqualsSingleFile) {
  const auto single_dir = test::golden_models_dir() / "llama3";
  const auto sharded_dir = test::golden_models_dir() / "llama3_sharded";
  if (!std::filesystem::exists(single_dir)) GTEST_SKIP() << "no fixtures";
  ASSERT_TRUE(std::filesystem::exists(sharded_dir / "model.safetensors.index.json"));
  Context ctx(Device::cpu());
  auto single = load_model(single_dir, Device::cpu(), DType::f32);
  auto sharded = load_model(sharded_dir, Device::cpu(), DType::f32);
  // Same weights, bit for bit.
  EXPECT_EQ(to_vector<float>(single->embedding_table().data),
            to_vector<float>(sharded->embedding_table().data));
  EXPECT_EQ(to_vector<float>(single->lm_head().data), to_vector<float>(sharded->lm_head().data));
  EXPECT_EQ(to_vector<float>(single->final_norm()), to_vector<float>(sharded->final_norm()));
  const test::GoldenSet g = test::load_golden_set(single_dir);
  const auto& tokens = g.prompts[2].tokens;
  std::vector<std::vector<float>> logits;
  for (Model* m : {single.get(), sharded.get()}) {
    PagedKvCache kv(m->kv_shape(16, test::pages_for(static_cast<int>(tokens.size()), 16)),
                    Device::cpu());
    ForwardBatch b;
    b.tokens = tokens;
    b.row_indptr = {0, static_cast<int32_t>(tokens.size())};
    b.seqs = {kv.create_sequence()};
    for (size_t i = 0; i < tokens.size(); ++i) b.logit_indices.push_back(static_cast<int32_t>(i));
    logits.push_back(to_vector<float>(m->forward(ctx, kv, b).logits));
  }
  EXPECT_EQ(test::max_abs_error(logits[0], logits[1]), 0.0);
}

// The llama3 fixture on the CPU with its third prompt: tests of ForwardBatch's options.
class ModelForwardCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = test::golden_models_dir() / "llama3";
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixtures";
    model_ = load_model(dir, Device::cpu(), DType::f32);
    tokens_ = test::load_golden_set(dir).prompts[2].tokens;
    ASSERT_GE(tokens_.size(), 2u);
  }
  int32_t n() const { return static_cast<int32_t>(tokens_.size()); }
  // One forward of the prompt as one new sequence (a fresh cache), with these logit rows.
  ForwardOutput forward(const std::vector<int32_t>& rows, bool want_argmax = false) {
    kv_ = std::make_unique<PagedKvCache>(model_->kv_shape(16, test::pages_for(n(), 16)),
                                         Device::cpu());
    ForwardBatch b;
    b.tokens = tokens_;
    b.row_indptr = {0, n()};
    b.seqs = {kv_->create_sequence()};
    b.logit_indices = rows;
    b.want_argmax = want_argmax;
    return model_->forward(ctx_, *kv_, b);
  }

  Context ctx_{Device::cpu()};
  std::unique_ptr<Model> model_;
  std::unique_ptr<PagedKvCache> kv_;
  std::vector<int32_t> tokens_;
};

// The logits of every row in order skip the gather before the LM head (llama_family.cpp,
// logits_of_every_row); the same rows in another order go through it: the same values.
TEST_F(ModelForwardCpu, LogitRowsInOrderEqualTheGatheredRows) {
  std::vector<int32_t> in_order(static_cast<size_t>(n())), reversed;
  for (int32_t i = 0; i < n(); ++i) in_order[static_cast<size_t>(i)] = i;
  reversed.assign(in_order.rbegin(), in_order.rend());
  const std::vector<float> a = to_vector<float>(forward(in_order).logits);
  const std::vector<float> b = to_vector<float>(forward(reversed).logits);
  ASSERT_EQ(a.size(), b.size());
  const auto rows = static_cast<size_t>(n());
  const size_t vocab = a.size() / rows;
  for (size_t r = 0; r < rows; ++r) {
    const size_t from = (rows - 1 - r) * vocab;
    const std::vector<float> row_a(a.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                                   a.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
    const std::vector<float> row_b(b.begin() + static_cast<std::ptrdiff_t>(from),
                                   b.begin() + static_cast<std::ptrdiff_t>(from + vocab));
    // The LM head's GEMM may block rows differently (a row's place in the blocks decides its
    // micro-kernel, which depends on the CPU): f32 rounding, not bits. A few ulps of the row's
    // largest logit.
    float scale = 0.0f;
    for (float v : row_a) scale = std::max(scale, std::abs(v));
    EXPECT_LE(test::max_abs_error(row_a, row_b),
              4.0 * std::numeric_limits<float>::epsilon() * scale)
        << "row " << r << " (largest |logit| " << scale << ")";
  }
}

// ForwardBatch::want_argmax: ForwardOutput::argmax holds the first index of each logits row's
// maximum (the greedy verify's target tokens); without it, argmax is null.
TEST_F(ModelForwardCpu, ArgmaxIsTheArgmaxOfTheLogits) {
  const std::vector<int32_t> rows = {n() - 1, 0, n() / 2};
  EXPECT_EQ(forward(rows).argmax, nullptr);
  const ForwardOutput out = forward(rows, true);
  ASSERT_NE(out.argmax, nullptr);
  const std::vector<float> logits = to_vector<float>(out.logits);
  const size_t vocab = logits.size() / rows.size();
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* row = logits.data() + r * vocab;
    EXPECT_EQ(out.argmax[r], static_cast<int32_t>(std::max_element(row, row + vocab) - row))
        << "row " << r;
  }
}

TEST(ModelRegistry, KnowsTheFamilyAndRejectsOthers) {
  const auto names = supported_architectures();
  for (const char* a :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), a), names.end()) << a;
    EXPECT_NE(find_architecture(a), nullptr);
  }
  EXPECT_EQ(find_architecture("GPT2LMHeadModel"), nullptr);
}

}  // namespace
}  // namespace dspark
