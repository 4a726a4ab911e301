// softmax, log_softmax, argmax: CUDA vs CPU for vocabularies up to 262144 and the argmax edge
// rules (ties -> smallest index, NaN skipped unless the whole row is NaN).
#include "dspark/ops/softmax.h"

#include <cmath>

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct Size {
  int64_t n, v;
};
constexpr Size kSizes[] = {{1, 1}, {3, 10}, {2, 1000}, {4, 32000}, {2, 151936}, {1, 262144}};

TEST(CudaSoftmax, SoftmaxAndLogSoftmaxMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (const Size s : kSizes) {
      const Pair x = random_pair(dtype, Shape{s.n, s.v}, seed++, 4.0f);
      const Pair p = zeros_pair(DType::f32, Shape{s.n, s.v});
      const Pair lp = zeros_pair(DType::f32, Shape{s.n, s.v});
      softmax(ctx.cpu, x.cpu, p.cpu);
      softmax(ctx.gpu, x.gpu, p.gpu);
      log_softmax(ctx.cpu, x.cpu, lp.cpu);
      log_softmax(ctx.gpu, x.gpu, lp.gpu);
      ctx.gpu.synchronize();
      const std::string what =
          name_of(dtype) + " [" + std::to_string(s.n) + ", " + std::to_string(s.v) + "]";
      expect_close(p.gpu, p.cpu, 1e-5, "softmax " + what);
      expect_close(lp.gpu, lp.cpu, 1e-5, "log_softmax " + what);
    }
  }
}

TEST(CudaSoftmax, StridedRows) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Pair x = random_pair(DType::bf16, Shape{5, 1100}, 3);
  const Pair p = random_pair(DType::f32, Shape{5, 1003}, 4);
  softmax(ctx.cpu, columns(x.cpu, 7, 1000), columns(p.cpu, 3, 1000));
  softmax(ctx.gpu, columns(x.gpu, 7, 1000), columns(p.gpu, 3, 1000));
  ctx.gpu.synchronize();
  expect_close(p.gpu, p.cpu, 1e-5, "strided softmax");
}

TEST(CudaSoftmax, ArgmaxMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 50;
  for (DType dtype : kFloatDTypes) {
    for (const Size s : kSizes) {
      // Values rounded to quarters: many exact ties, including ties for the maximum.
      std::vector<float> v = random_normal(static_cast<size_t>(s.n * s.v), seed++, 2.0f);
      for (float& f : v) f = std::round(f * 4.0f) / 4.0f;
      const Pair x = values_pair(v, dtype, Shape{s.n, s.v});
      const Pair idx = zeros_pair(DType::i32, Shape{s.n});
      argmax(ctx.cpu, x.cpu, idx.cpu);
      argmax(ctx.gpu, x.gpu, idx.gpu);
      ctx.gpu.synchronize();
      EXPECT_EQ(to_vector<int32_t>(idx.gpu), to_vector<int32_t>(idx.cpu))
          << name_of(dtype) << " [" << s.n << ", " << s.v << "]";
    }
  }
}

// index_map on both paths (one block per row, and rows split over chunks): CUDA == CPU.
TEST(CudaSoftmax, ArgmaxThroughIndexMap) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  for (const Size s : {Size{3, 1000}, Size{5, 32000}}) {
    const Pair x = random_pair(DType::bf16, Shape{s.n, s.v}, 901);
    std::vector<int32_t> ids(static_cast<size_t>(s.v));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(3 * i + 11);
    const Pair map = vector_pair(ids, Shape{s.v});
    const Pair idx = zeros_pair(DType::i32, Shape{s.n});
    argmax(ctx.cpu, x.cpu, idx.cpu, map.cpu);
    argmax(ctx.gpu, x.gpu, idx.gpu, map.gpu);
    ctx.gpu.synchronize();
    EXPECT_EQ(to_vector<int32_t>(idx.gpu), to_vector<int32_t>(idx.cpu)) << s.v;
    for (int32_t t : to_vector<int32_t>(idx.cpu)) EXPECT_EQ((t - 11) % 3, 0) << "mapped " << t;
  }
}

// Rows of 3000 take one block per row; rows of 20000 are split over chunks of 4096 (the ties, the
// NaNs and the maximum then sit in different chunks).
TEST(CudaSoftmax, ArgmaxEdgeRows) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  for (const int64_t v : {int64_t{3000}, int64_t{20000}}) {
    std::vector<float> rows(static_cast<size_t>(6 * v), 0.0f);
    auto row = [&](int r) { return rows.begin() + r * v; };
    std::fill(row(0), row(0) + v, -INFINITY);  // all -inf -> 0
    std::fill(row(1), row(1) + v, NAN);        // all NaN -> 0
    std::fill(row(2), row(2) + v, NAN);        // NaN everywhere but one value
    row(2)[2500] = -5.0f;
    row(3)[17] = 1.0f;  // ties at 17 and the last index
    row(3)[v - 1] = 1.0f;
    row(4)[0] = NAN;  // NaN first, then a maximum at the very end
    row(4)[v - 1] = 2.0f;
    row(5)[1234] = INFINITY;
    row(5)[100] = NAN;
    for (DType dtype : kFloatDTypes) {
      const Pair x = values_pair(rows, dtype, Shape{6, v});
      const Pair idx = zeros_pair(DType::i32, Shape{6});
      argmax(ctx.cpu, x.cpu, idx.cpu);
      argmax(ctx.gpu, x.gpu, idx.gpu);
      ctx.gpu.synchronize();
      const std::vector<int32_t> expected = {0, 0, 2500, 17, static_cast<int32_t>(v - 1), 1234};
      EXPECT_EQ(to_vector<int32_t>(idx.gpu), expected) << name_of(dtype) << " v " << v;
      EXPECT_EQ(to_vector<int32_t>(idx.cpu), expected) << name_of(dtype) << " v " << v;
    }
  }
}

}  // namespace
}  // namespace dspark::test
