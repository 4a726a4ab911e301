// MLX affine-quantized checkpoints on the GPU (tests/unit/mlx_model_test.cpp's fixtures, in bf16
// on CUDA): the 4-bit one keeps its Q4_1 blocks; the last position's logits are the CPU's (f32)
// within 5e-2 relative RMS (bf16 activations; the CPU rounds x to 8 bits), greedy decoding gives
// the CPU's tokens, and greedy speculative decoding with an n-gram source equals plain greedy.
#include <gtest/gtest.h>

#include <memory>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "cuda_consistency.h"
#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

std::unique_ptr<Model> load_fixture(const char* name, Device device, DType dtype) {
  return load_model(test::data_dir() / "mlx" / name, device, dtype);
}

class CudaMlxModel : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaMlxModel, MatchesTheCpu) {
  DSPARK_REQUIRE_CUDA();
  const bool four_bit = std::string(GetParam()).find("q4") != std::string::npos;
  auto gpu_model = load_fixture(GetParam(), test::kTestGpu, DType::bf16);
  auto cpu_model = load_fixture(GetParam(), Device::cpu(), DType::f32);
  EXPECT_EQ(gpu_model->lm_head().quantized(), four_bit);
  EXPECT_EQ(gpu_model->embedding_table().quantized(), four_bit);
  Context gpu(test::kTestGpu), cpu(Device::cpu());
  const int vocab = gpu_model->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const std::vector<float> g = test::last_position_logits(*gpu_model, gpu, prompt);
    const std::vector<float> c = test::last_position_logits(*cpu_model, cpu, prompt);
    const double err = test::relative_rms_error(g, c);
    std::cout << GetParam() << " prompt " << salt << ": relative RMS " << err << "\n";
    EXPECT_LE(err, 5e-2) << GetParam() << " prompt " << salt;
    EXPECT_EQ(generate(*gpu_model, gpu, prompt, test::greedy_tokens(16)).tokens,
              generate(*cpu_model, cpu, prompt, test::greedy_tokens(16)).tokens)
        << GetParam() << " prompt " << salt;
  }
}

TEST_P(CudaMlxModel, GreedySpeculativeEqualsPlainGreedy) {
  DSPARK_REQUIRE_CUDA();
  auto target = load_fixture(GetParam(), test::kTestGpu, DType::bf16);
  Context ctx(test::kTestGpu);
  const int vocab = target->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const std::vector<int32_t> plain =
        generate(*target, ctx, prompt, test::greedy_tokens(20)).tokens;
    for (int gamma : {1, 3}) {  // verifies of 2 and 4 rows
      NgramSource source(NgramConfig{1, 3});
      std::vector<RequestInput> reqs;
      reqs.push_back(RequestInput{prompt, test::greedy_tokens(20), nullptr, {}});
      SpecConfig cfg;
      cfg.gamma = gamma;
      const auto out = generate_speculative(*target, ctx, &source, std::move(reqs), cfg);
      EXPECT_EQ(out[0].result.tokens, plain)
          << GetParam() << " gamma " << gamma << " prompt " << salt;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMlxModel,
                         ::testing::Values("llama3_q4_g32", "llama3_q8_g64"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace dspark
