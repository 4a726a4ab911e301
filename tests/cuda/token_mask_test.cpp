// apply_token_mask: CUDA vs CPU, bit for bit, over verify-shaped batches (rows of 151936 logits,
// some rows masked, one listed twice) and vocabularies that are not a multiple of 32.
#include "dspark/ops/token_mask.h"

#include <random>

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

TEST(CudaTokenMask, MatchesCpuBitForBit) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 11;
  for (const auto& [n, vocab] : {std::pair{1, 10}, std::pair{5, 385}, std::pair{40, 151936}}) {
    Pair x = random_pair(DType::f32, Shape{n, vocab}, seed++, 3.0f);
    std::mt19937 gen(seed++);
    std::vector<int32_t> rows;
    for (int32_t r = 0; r < n; r += 2) rows.push_back(r);
    rows.push_back(0);  // listed twice: both masks apply
    const auto words = static_cast<size_t>(token_mask_words(vocab));
    std::vector<uint32_t> mask(rows.size() * words);
    // Mostly masked words (structured output), some fully allowed, some mixed.
    for (size_t i = 0; i < mask.size(); ++i)
      mask[i] = i % 7 == 0 ? ~0u : (i % 3 == 0 ? gen() : gen() & gen() & gen());
    apply_token_mask(ctx.cpu, x.cpu.view(), rows, mask);
    apply_token_mask(ctx.gpu, x.gpu.view(), rows, mask);
    ctx.gpu.synchronize();
    expect_equal(x.gpu.view(), x.cpu.view(),
                 "token mask [" + std::to_string(n) + ", " + std::to_string(vocab) + "]");
  }
}

}  // namespace
}  // namespace dspark::test
