// Models whose GGUF weights stay block-quantized on the GPU (tests/unit/quant_model_test.cpp's
// fixtures, in bf16 on CUDA): the blocks are kept; the last position's logits are the CPU's
// (f32, the same integer kernels) within 5e-2 relative RMS (bf16 activations; the tensor-core
// kernel's rows, 5 and more, multiply bf16 x where the CPU rounds x to 8 bits); greedy decoding
// gives the CPU's tokens; greedy speculative decoding with verifies of up to 4 rows (the few-row
// kernel: the same bits for every row count) equals plain greedy decoding.
#include <gtest/gtest.h>

#include <memory>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "cuda_consistency.h"
#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/gguf.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

std::unique_ptr<Model> load_fixture(const char* name, Device device, DType dtype) {
  const GgufFile file = GgufFile::open(test::data_dir() / "gguf" / name);
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  return create_model(config, weights, device, dtype);
}

class CudaQuantModel : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaQuantModel, KeepsBlocksAndMatchesTheCpu) {
  DSPARK_REQUIRE_CUDA();
  auto gpu_model = load_fixture(GetParam(), test::kTestGpu, DType::bf16);
  auto cpu_model = load_fixture(GetParam(), Device::cpu(), DType::f32);
  ASSERT_TRUE(gpu_model->lm_head().quantized());
  ASSERT_TRUE(gpu_model->embedding_table().quantized());
  Context gpu(test::kTestGpu), cpu(Device::cpu());
  const int vocab = gpu_model->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const std::vector<float> g = test::last_position_logits(*gpu_model, gpu, prompt);
    const std::vector<float> c = test::last_position_logits(*cpu_model, cpu, prompt);
    EXPECT_LE(test::relative_rms_error(g, c), 5e-2) << GetParam() << " prompt " << salt;
    EXPECT_EQ(generate(*gpu_model, gpu, prompt, test::greedy_tokens(16)).tokens,
              generate(*cpu_model, cpu, prompt, test::greedy_tokens(16)).tokens)
        << GetParam() << " prompt " << salt;
  }
}

TEST_P(CudaQuantModel, GreedySpeculativeEqualsPlainGreedy) {
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

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaQuantModel,
                         ::testing::Values("tiny_llama_quant.gguf", "tiny_llama_k.gguf"),
                         [](const auto& p) {
                           return std::string(p.param).find("_k") != std::string::npos
                                      ? std::string("KQuants")
                                      : std::string("Block32");
                         });

}  // namespace
}  // namespace dspark
