// Greedy losslessness on CUDA for every tiny golden target, and coupled sampling: the same seed
// gives the same tokens with speculation on and off (see common/lossless.h).
#include <gtest/gtest.h>

#include "common/lossless.h"
#include "cuda_consistency.h"

namespace dspark {
namespace {

class CudaSpecLossless : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSpecLossless, GreedySpeculativeEqualsPlainGreedy) {
  DSPARK_REQUIRE_CUDA();
  test::check_greedy_lossless(GetParam(), test::kTestGpu);
}

TEST_P(CudaSpecLossless, CoupledSamplingEqualsPlainSampling) {
  DSPARK_REQUIRE_CUDA();
  std::vector<test::NamedSource> extra;
  if (GetParam() == "qwen3") extra.push_back(test::dspark_fixture_source("qwen3_dflash"));
  if (GetParam() == "llama3") extra.push_back(test::dspark_fixture_source("llama3_deepspec"));
  test::check_coupled_equals_plain(GetParam(), test::kTestGpu, extra);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, CudaSpecLossless,
                         ::testing::Values("llama3", "qwen2", "qwen3", "qwen3_yarn", "mistral",
                                           "qwen3_moe", "deepseek_v3", "glm4_moe", "glm_moe_dsa",
                                           "deepseek_v3_q_proj"));

}  // namespace
}  // namespace dspark
