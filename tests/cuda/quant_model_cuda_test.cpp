// Quantized models on the GPU (bf16 activations) against the same files on the CPU (f32), for the
// GGUF fixtures of tests/unit/quant_model_test.cpp, the MLX fixtures of
// tests/unit/mlx_model_test.cpp and the FP8 checkpoint of tests/unit/fp8_checkpoint_test.cpp:
//  - the blocks are kept where the CPU keeps them (every GGUF fixture, MLX 4-bit as Q4_1 and
//    8-bit as Q8_A: groups of 64 expanded at upload to those 32-value blocks, where the CPU keeps
//    Q4_A64 / Q8_A64); the FP8 projections stay E4M3 codes with their block scales (nothing
//    says on stderr that they were dequantized);
//  - the last position's logits are the CPU's within 5e-2 relative RMS (bf16 activations; the
//    tensor-core kernel's rows, 5 and more, multiply bf16 x where the CPU rounds x to 8 bits) and
//    greedy decoding gives the CPU's tokens (except where a fixture says otherwise, below);
//  - greedy speculative decoding with verifies of up to 4 rows (the few-row kernel: the same bits
//    for every row count) equals plain greedy decoding.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "cuda_consistency.h"
#include "dspark/backend/context.h"
#include "dspark/core/quant.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/gguf.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/model.h"
#include "dspark/model/registry.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

struct Fixture {
  const char* name;  // the test's name
  const char* path;  // under tests/data
  bool gguf;         // a GGUF file, else a checkpoint directory (MLX or FP8)
  bool blocks;       // its tables (embedding, LM head) stay block-quantized
  bool fp8 = false;  // an FP8 checkpoint whose projections stay as stored
  // Greedy decoding gives the CPU's 16 tokens on every prompt. Off for the 8-bit MLX fixture: its
  // Q8_A layers (K of 64: the dequantizing path, bf16 x) and the CPU's (f32 x rounded to int8)
  // chose different tokens at a near tie on one of the three prompts (token 5 of prompt 1, on the
  // H200), with the logits within the 5e-2 bound and the other prompts' 16 tokens equal; the
  // CPU's own dequantized twin differs from it at near ties too (tests/unit/mlx_model_test.cpp).
  // Off for the 4-bit group-64 fixture too: token 11 of prompt 0 is a near tie on the CPU (logits
  // 24.561 and 24.529 of tokens 152 and 85, a margin of 0.13%), which the H200's bf16 activations
  // (groups expanded to Q4_1 blocks) resolved the other way, the logits within the bound. Off for
  // the 3-bit fixture: token 1 of prompt 2 is a near tie on the CPU (logits 22.469, 22.428 and
  // 22.348 of tokens 237, another and 218), where an H100's bf16 activations chose 218, the
  // logits within the bound.
  bool greedy_matches = true;
};

std::unique_ptr<Model> load_fixture(const Fixture& f, Device device, DType dtype) {
  const std::filesystem::path path = test::data_dir() / f.path;
  if (!f.gguf) return load_model(path, device, dtype);
  const GgufFile file = GgufFile::open(path);
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  return create_model(config, weights, device, dtype);
}

class CudaQuantModel : public ::testing::TestWithParam<Fixture> {};

TEST_P(CudaQuantModel, KeepsBlocksAndMatchesTheCpu) {
  DSPARK_REQUIRE_CUDA();
  const Fixture& f = GetParam();
  testing::internal::CaptureStderr();
  auto gpu_model = load_fixture(f, test::kTestGpu, DType::bf16);
  const std::string err = testing::internal::GetCapturedStderr();
  if (f.fp8) {
    EXPECT_EQ(err.find("dequantized"), std::string::npos) << err;
  }
  auto cpu_model = load_fixture(f, Device::cpu(), DType::f32);
  ASSERT_EQ(gpu_model->lm_head().quantized(), f.blocks);
  ASSERT_EQ(gpu_model->embedding_table().quantized(), f.blocks);
  if (f.blocks) {
    EXPECT_EQ(gpu_model->lm_head().quant, quant_unit_type(cpu_model->lm_head().quant));
    EXPECT_EQ(gpu_model->embedding_table().quant,
              quant_unit_type(cpu_model->embedding_table().quant));
  }
  Context gpu(test::kTestGpu), cpu(Device::cpu());
  const int vocab = gpu_model->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const std::vector<float> g = test::last_position_logits(*gpu_model, gpu, prompt);
    const std::vector<float> c = test::last_position_logits(*cpu_model, cpu, prompt);
    EXPECT_LE(test::relative_rms_error(g, c), 5e-2) << f.name << " prompt " << salt;
    if (f.greedy_matches) {
      EXPECT_EQ(generate(*gpu_model, gpu, prompt, test::greedy_tokens(16)).tokens,
                generate(*cpu_model, cpu, prompt, test::greedy_tokens(16)).tokens)
          << f.name << " prompt " << salt;
    }
  }
}

TEST_P(CudaQuantModel, GreedySpeculativeEqualsPlainGreedy) {
  DSPARK_REQUIRE_CUDA();
  const Fixture& f = GetParam();
  auto target = load_fixture(f, test::kTestGpu, DType::bf16);
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
      EXPECT_EQ(out[0].result.tokens, plain) << f.name << " gamma " << gamma << " prompt " << salt;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CudaQuantModel,
    ::testing::Values(Fixture{"Block32", "gguf/tiny_llama_quant.gguf", true, true},
                      Fixture{"KQuants", "gguf/tiny_llama_k.gguf", true, true},
                      Fixture{"llama3_q4_g32", "mlx/llama3_q4_g32", false, true},
                      Fixture{"llama3_q4_g64", "mlx/llama3_q4_g64", false, true, false, false},
                      Fixture{"llama3_q8_g64", "mlx/llama3_q8_g64", false, true, false, false},
                      Fixture{"llama3_q3_g64", "mlx/llama3_q3_g64", false, true, false, false},
                      Fixture{"llama3_fp8", "fp8/llama3_fp8", false, false, true}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace dspark
