// Greedy losslessness on the CPU (f32) for every tiny golden target (see common/lossless.h).
#include <gtest/gtest.h>

#include "common/lossless.h"

namespace dspark {
namespace {

class SpecLossless : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecLossless, GreedySpeculativeEqualsPlainGreedy) {
  test::check_greedy_lossless(GetParam(), Device::cpu());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, SpecLossless,
                         ::testing::Values("llama3", "qwen2", "qwen3", "qwen3_yarn", "mistral",
                                           "qwen3_moe", "deepseek_v3", "glm4_moe", "glm_moe_dsa",
                                           "deepseek_v3_q_proj"));

}  // namespace
}  // namespace dspark
