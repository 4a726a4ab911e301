// batch_invariance_gaps / exact_notice (model/exact_numerics.h): what `--exact` does not cover yet
// is named for the models that have it (block-quantized weights), and nothing for float models.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "dspark/model/exact_numerics.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {

std::vector<std::string> gaps_of(const std::string& path) {
  return batch_invariance_gaps(*load_model(test::data_dir() / path, Device::cpu(), DType::f32));
}

TEST(ExactNumerics, FloatModelsHaveNoGaps) {
  EXPECT_TRUE(gaps_of("models/llama3").empty());
  EXPECT_TRUE(gaps_of("models/qwen3").empty());
  EXPECT_TRUE(gaps_of("models/qwen3_moe").empty());
  EXPECT_TRUE(gaps_of("models/deepseek_v3").empty());
  EXPECT_TRUE(
      exact_notice(*load_model(test::data_dir() / "models/qwen2", Device::cpu(), DType::f32))
          .empty());
}

TEST(ExactNumerics, QuantizedWeightsAreNamed) {
  const std::vector<std::string> k = gaps_of("gguf/tiny_llama_k.gguf");
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NE(k[0].find("weights"), std::string::npos) << k[0];
  const std::string notice = exact_notice(
      *load_model(test::data_dir() / "gguf/tiny_llama_k.gguf", Device::cpu(), DType::f32));
  EXPECT_EQ(notice, "--exact does not cover these yet on CUDA: " + k[0] +
                        "; speculative output may still differ from plain decoding");
}

}  // namespace
}  // namespace dspark
