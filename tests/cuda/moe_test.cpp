// moe_route, moe_route_grouped and moe_combine: CUDA vs CPU. The route must choose the same experts
// in the same order (ties -> the lower index, NaN last) with weights equal to f32 rounding.
#include "dspark/ops/moe.h"

#include <cmath>

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

TEST(CudaMoe, RouteMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (const auto [n, experts, k] : {std::array<int64_t, 3>{1, 8, 2},
                                       {37, 8, 2},
                                       {5, 128, 8},
                                       {300, 64, 6},
                                       {3, 256, 8},
                                       {9, 33, 1}}) {
      for (bool normalize : {false, true}) {
        // Logits rounded to quarters: exact ties between experts in many rows.
        std::vector<float> v = random_normal(static_cast<size_t>(n * experts), seed++, 2.0f);
        if (seed % 2 == 0)
          for (float& f : v) f = std::round(f * 4.0f) / 4.0f;
        const Pair logits = values_pair(v, dtype, Shape{n, experts});
        const Pair ids = zeros_pair(DType::i32, Shape{n, k});
        const Pair w = zeros_pair(DType::f32, Shape{n, k});
        moe_route(ctx.cpu, logits.cpu, normalize, ids.cpu, w.cpu);
        moe_route(ctx.gpu, logits.gpu, normalize, ids.gpu, w.gpu);
        ctx.gpu.synchronize();
        const std::string what =
            fmt::format("{} n={} E={} k={} normalize={}", name_of(dtype), n, experts, k, normalize);
        EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids " << what;
        // The softmax denominator sums E experts in another order (warp tree against the CPU's
        // sequential loop): f32 rounding of up to ~E ulps in the worst case, ~sqrt(E) typical.
        expect_close(w.gpu, w.cpu, 1e-5, "weights " + what);
      }
    }
  }
}

TEST(CudaMoe, RouteNanRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const std::vector<float> v = {1, 3, 3, 0, 3, NAN, 0, 2, 2, -1};
  const Pair logits = values_pair(v, DType::f32, Shape{2, 5});
  const Pair ids = zeros_pair(DType::i32, Shape{2, 3});
  const Pair w = zeros_pair(DType::f32, Shape{2, 3});
  moe_route(ctx.cpu, logits.cpu, false, ids.cpu, w.cpu);
  moe_route(ctx.gpu, logits.gpu, false, ids.gpu, w.gpu);
  ctx.gpu.synchronize();
  EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids";
  expect_equal(w.gpu, w.cpu, "weights (NaN where the CPU has NaN)");
}

TEST(CudaMoe, RouteGroupedMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 50;
  for (DType dtype : kFloatDTypes) {
    for (const auto [n, experts, groups, topk_group, k] : {std::array<int64_t, 5>{1, 8, 4, 2, 2},
                                                           {37, 8, 1, 1, 3},
                                                           {5, 256, 8, 4, 8},
                                                           {300, 64, 8, 3, 6},
                                                           {9, 160, 40, 36, 1}}) {
      for (bool normalize : {false, true}) {
        // Logits rounded to quarters and a zero bias on odd seeds: exact ties between experts
        // and between groups in many rows.
        std::vector<float> v = random_normal(static_cast<size_t>(n * experts), seed++, 2.0f);
        std::vector<float> b = random_normal(static_cast<size_t>(experts), seed++, 0.1f);
        if (seed % 2 == 0) {
          for (float& f : v) f = std::round(f * 4.0f) / 4.0f;
          std::fill(b.begin(), b.end(), 0.0f);
        }
        const Pair logits = values_pair(v, dtype, Shape{n, experts});
        const Pair bias = values_pair(b, DType::f32, Shape{experts});
        const Pair ids = zeros_pair(DType::i32, Shape{n, k});
        const Pair w = zeros_pair(DType::f32, Shape{n, k});
        const MoeGroupRouting p{static_cast<int>(groups), static_cast<int>(topk_group), normalize,
                                2.5f};
        moe_route_grouped(ctx.cpu, logits.cpu, bias.cpu, p, ids.cpu, w.cpu);
        moe_route_grouped(ctx.gpu, logits.gpu, bias.gpu, p, ids.gpu, w.gpu);
        ctx.gpu.synchronize();
        const std::string what =
            fmt::format("{} n={} E={} G={} TG={} k={} normalize={}", name_of(dtype), n, experts,
                        groups, topk_group, k, normalize);
        // The same sigmoid up to an ulp of expf: ties built from equal logits stay ties.
        EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids " << what;
        expect_close(w.gpu, w.cpu, 1e-5, "weights " + what);
      }
    }
  }
}

TEST(CudaMoe, CombineMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 100;
  for (DType in : kFloatDTypes) {
    for (DType out : {DType::f32, in}) {
      for (const auto [n, k, h] : {std::array<int64_t, 3>{1, 2, 64}, {17, 8, 2048}, {5, 1, 37}}) {
        const int64_t m = n * k;
        const Pair ex = random_pair(in, Shape{m, h}, seed++);
        std::vector<int32_t> slots =
            random_ints(static_cast<size_t>(n * k), 0, static_cast<int32_t>(m - 1), seed++);
        const Pair s = vector_pair(slots, Shape{n, k});
        const Pair w = random_pair(DType::f32, Shape{n, k}, seed++);
        const Pair o = zeros_pair(out, Shape{n, h});
        moe_combine(ctx.cpu, ex.cpu, s.cpu, w.cpu, o.cpu);
        moe_combine(ctx.gpu, ex.gpu, s.gpu, w.gpu, o.gpu);
        ctx.gpu.synchronize();
        expect_close(o.gpu, o.cpu, tolerance(out),
                     fmt::format("{} -> {} n={} k={} h={}", name_of(in), name_of(out), n, k, h));
      }
    }
  }
}

}  // namespace
}  // namespace dspark::test
