// apply_token_mask (ops/token_mask.h) against a per-token reference: masked logits become -inf,
// allowed ones keep their bits, bits past the vocabulary are ignored, a row listed twice keeps
// what both masks allow; and the argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/ops/token_mask.h"

namespace dspark {
namespace {

TEST(OpsTokenMask, MatchesReference) {
  Context ctx(Device::cpu());
  std::mt19937 gen(5);
  for (const int64_t v : {1, 31, 32, 70, 1000}) {
    const int64_t n = 4, words = token_mask_words(v);
    std::vector<float> x(static_cast<size_t>(n * v));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& f : x) f = normal(gen);
    x[0] = NAN;  // an allowed NaN stays NaN, a masked one becomes -inf
    const std::vector<int32_t> rows = {0, 2, 3, 2};
    std::vector<uint32_t> mask(rows.size() * static_cast<size_t>(words));
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 5 == 1 ? ~0u : gen();
    std::vector<float> want = x;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t t = 0; t < v; ++t)
        if (((mask[i * static_cast<size_t>(words) + static_cast<size_t>(t / 32)] >> (t % 32)) &
             1u) == 0)
          want[static_cast<size_t>(rows[i] * v + t)] = -INFINITY;
    OwnedTensor logits = OwnedTensor::from_vector(x, Shape{n, v}, Device::cpu());
    apply_token_mask(ctx, logits.view(), rows, mask);
    const std::vector<float> got = to_vector<float>(logits.view());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "V " << v;
  }
}

TEST(OpsTokenMask, RejectsBadArguments) {
  Context ctx(Device::cpu());
  OwnedTensor logits(DType::f32, Shape{2, 40}, Device::cpu());
  const std::vector<uint32_t> two(2, ~0u), four(4, ~0u);
  EXPECT_THROW(apply_token_mask(ctx, logits.view(), std::vector<int32_t>{0}, four), Error);
  EXPECT_THROW(apply_token_mask(ctx, logits.view(), std::vector<int32_t>{2}, two), Error);
  EXPECT_THROW(apply_token_mask(ctx, logits.view(), std::vector<int32_t>{-1}, two), Error);
  EXPECT_NO_THROW(apply_token_mask(ctx, logits.view(), std::vector<int32_t>{1, 1}, four));
  EXPECT_NO_THROW(apply_token_mask(ctx, logits.view(), {}, {}));
}

}  // namespace
}  // namespace dspark
