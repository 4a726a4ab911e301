// Every fixture model on CUDA in bf16 against the Hugging Face f32 goldens: relative RMS error
// <= 2e-2 for logits, taps and final hidden states; greedy continuations token-identical
// (or identical up to a decision whose f32 margin is too small for bf16, see kMinMarginBf16);
// batched and chunked forwards match per-prompt results. Mixture-of-experts fixtures run in f32
// (CUDA f32 GEMMs use no TF32) with the CPU's tolerance: in bf16 some token of a random-weight
// model always has two experts close enough to swap (docs/goldens.md). glm_moe_dsa (DeepSeek
// sparse attention, index_topk 6) has prompts longer than its top-k, so its indexer's selection
// really drops keys on CUDA too. Skips without a GPU.
#include <gtest/gtest.h>

#include <iostream>

#include "common/test_util.h"
#include "dspark/model/config.h"
#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

constexpr double kTolBf16 = 2e-2;
// Greedy decisions whose f32 top-1/top-2 margin is below this are close calls in bf16: our bf16
// logits on these fixtures are off by ~0.07 RMS (relative RMS ~8e-3 of logits with std ~8;
// Hugging Face's own bf16 model is at ~1.2e-2), so a margin of 0.16 (qwen3_yarn p2, last step) can
// flip. Greedy paths must be identical, except that they may diverge at a close call.
constexpr float kMinMarginBf16 = 0.25f;
constexpr double kTolF32 = 1e-4;

// The engine dtype of a fixture on CUDA, its tolerance and the greedy margin it needs.
struct CudaRun {
  DType dtype;
  double tol;
  float min_margin;
};
CudaRun cuda_run(const std::filesystem::path& dir) {
  if (load_model_config(dir).num_experts > 0) return {DType::f32, kTolF32, 0.0f};
  return {DType::bf16, kTolBf16, kMinMarginBf16};
}

// The goldens with the f32 margin of every greedy decision, computed by the CPU f32 model (which
// matches Hugging Face to ~5e-7 relative RMS, tests/unit/model_golden_test.cpp).
test::GoldenSet goldens_with_margins(const std::filesystem::path& dir) {
  test::GoldenSet g = test::load_golden_set(dir);
  Context cpu(Device::cpu());
  auto reference = load_model(dir, Device::cpu(), DType::f32);
  test::with_greedy_margins(*reference, cpu, g);
  return g;
}

class ModelGoldenCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!test::cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!std::filesystem::exists(test::golden_models_dir())) {
      GTEST_SKIP() << "no fixtures in " << test::golden_models_dir();
    }
    dir_ = test::golden_models_dir() / GetParam();
    ASSERT_TRUE(std::filesystem::exists(dir_)) << dir_;
  }
  std::filesystem::path dir_;
};

TEST_P(ModelGoldenCuda, LogitsTapsFinalHiddenAndGreedy) {
  Context ctx(Device::cuda(0));
  const CudaRun run = cuda_run(dir_);
  auto model = load_model(dir_, Device::cuda(0), run.dtype);
  EXPECT_EQ(model->activation_dtype(), run.dtype);
  const test::GoldenSet g = goldens_with_margins(dir_);
  test::WorstErrors worst;
  for (int p = 0; p < static_cast<int>(g.prompts.size()); ++p) {
    test::check_single_prompt_forward(*model, ctx, g, p, run.tol, worst);
    test::check_greedy_generate(*model, ctx, g, p, run.min_margin);
  }
  std::cout << "[" << GetParam() << " cuda " << dtype_name(run.dtype)
            << "] worst rel RMS: " << worst.str() << "\n";
}

TEST_P(ModelGoldenCuda, BatchedAndChunkedMatchPerPrompt) {
  Context ctx(Device::cuda(0));
  const CudaRun run = cuda_run(dir_);
  auto model = load_model(dir_, Device::cuda(0), run.dtype);
  const test::GoldenSet g = goldens_with_margins(dir_);
  test::WorstErrors worst;
  test::check_batched(*model, ctx, g, {1 << 20}, run.tol, worst, "batched", run.min_margin);
  test::check_batched(*model, ctx, g, {3, 7, 16}, run.tol, worst, "chunked", run.min_margin);
  std::cout << "[" << GetParam() << " cuda " << dtype_name(run.dtype)
            << "] worst rel RMS: " << worst.str() << "\n";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelGoldenCuda,
                         ::testing::ValuesIn(test::golden_model_names()));

TEST(ModelGoldenCuda, DecodeStepsDoNotAllocate) {
  if (!test::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto dir = test::golden_models_dir() / "qwen3";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no fixtures";
  Context ctx(Device::cuda(0));
  auto model = load_model(dir, Device::cuda(0), DType::bf16);
  PagedKvCache kv(model->kv_shape(16, 8), Device::cuda(0));
  const SeqId s = kv.create_sequence();
  ForwardBatch b;
  b.tokens = {5, 6, 7, 8};
  b.row_indptr = {0, 4};
  b.seqs = {s};
  b.logit_indices = {3};
  model->forward(ctx, kv, b);
  b.tokens = {9};
  b.row_indptr = {0, 1};
  b.logit_indices = {0};
  model->forward(ctx, kv, b);
  ctx.synchronize();
  const int64_t before = memory_stats(Device::cuda(0)).n_allocations;
  for (int i = 0; i < 10; ++i) model->forward(ctx, kv, b);
  ctx.synchronize();
  EXPECT_EQ(memory_stats(Device::cuda(0)).n_allocations, before);
}

}  // namespace
}  // namespace dspark
