// apply_penalties: CUDA vs CPU, bit for bit (both use the same rounded f32 operations), over
// verify-shaped batches (rows of 151936 logits, thousands of scattered edits) and the edge values
// (repetition < 1 and > 1 on positive, negative and zero logits, negative subtractions, +inf
// masks).
#include "dspark/ops/penalties.h"

#include <cmath>
#include <random>

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

std::vector<PenaltyEntry> random_entries(int64_t rows, int64_t vocab, size_t per_row,
                                         uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  const float reps[] = {1.0f, 1.3f, 0.7f, 2.0f};
  // +inf: a structured-output mask (the logit becomes -inf).
  const float subs[] = {0.0f, 0.5f, -1.25f, 1.9f, 0.1f, INFINITY};
  std::vector<PenaltyEntry> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> ids;
    while (ids.size() < std::min<size_t>(per_row, static_cast<size_t>(vocab))) {
      const int32_t t = tok(gen);
      if (std::find(ids.begin(), ids.end(), t) == ids.end()) ids.push_back(t);
    }
    for (const int32_t t : ids)
      out.push_back(PenaltyEntry{static_cast<int32_t>(r), t, reps[gen() % 4], subs[gen() % 6]});
  }
  return out;
}

TEST(CudaPenalties, MatchCpuBitForBit) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 7;
  for (const auto& [rows, vocab, per_row] :
       {std::tuple{1, 10, 10}, std::tuple{5, 384, 40}, std::tuple{40, 151936, 2000}}) {
    Pair x = random_pair(DType::f32, Shape{rows, vocab}, seed++, 3.0f);
    const auto entries = random_entries(rows, vocab, static_cast<size_t>(per_row), seed++);
    apply_penalties(ctx.cpu, x.cpu.view(), entries);
    apply_penalties(ctx.gpu, x.gpu.view(), entries);
    ctx.gpu.synchronize();
    expect_equal(x.gpu.view(), x.cpu.view(),
                 "penalties [" + std::to_string(rows) + ", " + std::to_string(vocab) + "]");
  }
}

TEST(CudaPenalties, ZeroAndSignedLogits) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  Pair x = values_pair({2.5f, -2.5f, 0.0f, -0.0f, 1e-30f, -1e30f}, DType::f32, Shape{1, 6});
  std::vector<PenaltyEntry> entries;
  for (int32_t t = 0; t < 6; ++t) entries.push_back(PenaltyEntry{0, t, 1.7f, t % 2 ? -0.3f : 0.6f});
  apply_penalties(ctx.cpu, x.cpu.view(), entries);
  apply_penalties(ctx.gpu, x.gpu.view(), entries);
  ctx.gpu.synchronize();
  expect_equal(x.gpu.view(), x.cpu.view(), "edge values");
}

}  // namespace
}  // namespace dspark::test
