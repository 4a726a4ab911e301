// Greedy losslessness on CUDA (bf16) for every tiny golden target (see common/lossless.h).
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

INSTANTIATE_TEST_SUITE_P(TinyModels, CudaSpecLossless,
                         ::testing::Values("llama3", "qwen2", "qwen3", "qwen3_yarn", "mistral",
                                           "qwen3_moe"));

}  // namespace
}  // namespace dspark
