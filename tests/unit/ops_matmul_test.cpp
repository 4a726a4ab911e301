// linear against a naive double-precision reference, over the CPU paths (the small-M kernel for
// M <= 32 with f32 and 16-bit weights, the blocked conversion + sgemm path for larger M).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/matmul.h"

namespace dspark {
namespace {

using test::random_tensor;
using test::relative_rms_error;

// y = x . w^T + bias in double from the (already rounded) input values.
std::vector<float> linear_reference(const std::vector<float>& x, const std::vector<float>& w,
                                    const std::vector<float>& bias, int64_t m, int64_t n,
                                    int64_t k) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias.empty() ? 0.0 : bias[j];
      for (int64_t i = 0; i < k; ++i) s += static_cast<double>(x[r * k + i]) * w[j * k + i];
      y[r * n + j] = static_cast<float>(s);
    }
  return y;
}

struct MatmulCase {
  int64_t m, n, k;
  DType x, w, y;
  DType bias;  // i8 = no bias
};

void run_case(Context& ctx, const MatmulCase& c, double tol) {
  SCOPED_TRACE(fmt::format("M={} N={} K={} x={} w={} y={} bias={}", c.m, c.n, c.k, dtype_name(c.x),
                           dtype_name(c.w), dtype_name(c.y),
                           c.bias == DType::i8 ? "none" : dtype_name(c.bias)));
  // x and y are slices of wider buffers: row strides K + 3 and N + 5.
  OwnedTensor x_buf = random_tensor(c.x, Shape{c.m, c.k + 3}, 1000 + c.m + c.k);
  const Tensor x = x_buf.view().slice(1, 0, c.k);
  OwnedTensor w = random_tensor(c.w, Shape{c.n, c.k}, 2000 + c.n, 0.1f);
  OwnedTensor bias_t;
  Tensor bias;
  if (c.bias != DType::i8) {
    bias_t = random_tensor(c.bias, Shape{c.n}, 3000 + c.n);
    bias = bias_t.view();
  }
  OwnedTensor y_buf = OwnedTensor::zeros(c.y, Shape{c.m, c.n + 5}, Device::cpu());
  const Tensor y = y_buf.view().slice(1, 0, c.n);
  linear(ctx, x, w, bias, y);
  const auto ref =
      linear_reference(to_f32_vector(x), to_f32_vector(w),
                       bias.defined() ? to_f32_vector(bias) : std::vector<float>{}, c.m, c.n, c.k);
  EXPECT_LE(relative_rms_error(to_f32_vector(y), ref), tol);
  // The padding after each output row is untouched.
  const std::vector<float> full = to_f32_vector(y_buf);
  for (int64_t r = 0; r < c.m; ++r)
    for (int64_t j = c.n; j < c.n + 5; ++j) ASSERT_EQ(full[r * (c.n + 5) + j], 0.0f);
}

// f32 output: relative RMS error <= 1e-5 (f32 accumulation over K terms);
// 16-bit output: its own rounding dominates (bf16 2^-9, f16 2^-12 relative per element).
double matmul_tolerance(DType y) {
  return y == DType::f32 ? 1e-5 : (y == DType::bf16 ? 4e-3 : 6e-4);
}

TEST(OpsMatmul, LinearF32Shapes) {
  Context ctx(Device::cpu());
  for (int64_t m : {1, 2, 9, 33})
    for (int64_t n : {1, 3, 17, 127})
      for (int64_t k : {1, 3, 17, 127, 4099})
        for (DType bias : {DType::i8, DType::f32})
          run_case(ctx, {m, n, k, DType::f32, DType::f32, DType::f32, bias}, 1e-5);
}

TEST(OpsMatmul, Linear16BitWeightsFewRows) {
  Context ctx(Device::cpu());
  for (int64_t m : {1, 3, 8})
    for (int64_t n : {1, 17, 127})
      for (int64_t k : {1, 17, 4099})
        for (auto [xd, wd, yd] : {std::tuple{DType::bf16, DType::bf16, DType::bf16},
                                  {DType::bf16, DType::bf16, DType::f32},
                                  {DType::f32, DType::bf16, DType::f32},
                                  {DType::f16, DType::f16, DType::f16},
                                  {DType::f32, DType::f32, DType::bf16}})
          run_case(ctx, {m, n, k, xd, wd, yd, DType::bf16}, matmul_tolerance(yd));
}

TEST(OpsMatmul, Linear16BitWeightsManyRows) {
  Context ctx(Device::cpu());
  for (int64_t m : {9, 33})
    for (int64_t n : {3, 127})
      for (int64_t k : {17, 4099})
        for (auto [xd, wd, yd] : {std::tuple{DType::bf16, DType::bf16, DType::bf16},
                                  {DType::bf16, DType::bf16, DType::f32},
                                  {DType::f32, DType::f16, DType::f32},
                                  {DType::f32, DType::f32, DType::f16}})
          run_case(ctx, {m, n, k, xd, wd, yd, DType::i8}, matmul_tolerance(yd));
}

// More weight rows than one conversion block holds (16 MiB of f32 = 1023 rows of K = 4099).
TEST(OpsMatmul, LinearWeightConvertedInSeveralBlocks) {
  Context ctx(Device::cpu());
  run_case(ctx, {10, 2100, 4099, DType::bf16, DType::bf16, DType::f32, DType::f32}, 1e-5);
}

TEST(OpsMatmul, EmptyReductionGivesBias) {
  Context ctx(Device::cpu());
  OwnedTensor x(DType::f32, Shape{3, 0}, Device::cpu());
  OwnedTensor w(DType::bf16, Shape{4, 0}, Device::cpu());
  OwnedTensor bias =
      OwnedTensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4}, Device::cpu());
  OwnedTensor y(DType::f32, Shape{3, 4}, Device::cpu());
  linear(ctx, x, w, bias, y);
  EXPECT_EQ(to_f32_vector(y), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(OpsMatmul, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor x = random_tensor(DType::f32, Shape{4, 8}, 1);
  OwnedTensor w = random_tensor(DType::f32, Shape{6, 8}, 2);
  OwnedTensor w_bad = random_tensor(DType::f32, Shape{6, 7}, 2);
  OwnedTensor y(DType::f32, Shape{4, 6}, Device::cpu());
  OwnedTensor y_bad(DType::f32, Shape{4, 5}, Device::cpu());
  EXPECT_THROW(linear(ctx, x, w_bad, Tensor(), y), Error);
  EXPECT_THROW(linear(ctx, x, w, Tensor(), y_bad), Error);
  OwnedTensor bias_bad = random_tensor(DType::f32, Shape{5}, 3);
  EXPECT_THROW(linear(ctx, x, w, bias_bad, y), Error);
  // a transposed (non-contiguous) weight
  const Tensor w_t(w.view().data(), DType::f32, Shape{6, 8}, Shape{1, 6}, Device::cpu());
  EXPECT_THROW(linear(ctx, x, w_t, Tensor(), y), Error);
  // y overlapping x
  OwnedTensor buf = random_tensor(DType::f32, Shape{4, 14}, 4);
  EXPECT_THROW(linear(ctx, buf.view().slice(1, 0, 8), w, Tensor(), buf.view().slice(1, 8, 14)),
               Error);
  OwnedTensor xi(DType::i32, Shape{4, 8}, Device::cpu());
  EXPECT_THROW(linear(ctx, xi, w, Tensor(), y), Error);
}

// Each head's columns times that head's own matrix, from strided views of wider buffers (MLA's
// absorbed projections: x the first K columns of each head's 24).
TEST(OpsMatmul, LinearPerHeadMatchesAReference) {
  Context ctx(Device::cpu());
  const int64_t n = 3, heads = 4, k = 16, rows = 5, width = 24;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const OwnedTensor xbuf = random_tensor(dtype, Shape{n, heads, width}, 1);
    const OwnedTensor w = random_tensor(dtype, Shape{heads, rows, k}, 2);
    OwnedTensor y(DType::f32, Shape{n, heads, rows}, Device::cpu());
    linear_per_head(ctx, xbuf.view().slice(2, 0, k), w, y);
    const std::vector<float> xv = to_f32_vector(xbuf.view()), wv = to_f32_vector(w.view()),
                             yv = to_f32_vector(y.view());
    std::vector<float> ref(yv.size());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t o = 0; o < rows; ++o) {
          double sum = 0.0;
          for (int64_t c = 0; c < k; ++c)
            sum += static_cast<double>(xv[static_cast<size_t>((t * heads + h) * width + c)]) *
                   wv[static_cast<size_t>((h * rows + o) * k + c)];
          ref[static_cast<size_t>((t * heads + h) * rows + o)] = static_cast<float>(sum);
        }
    EXPECT_LE(test::max_abs_error(yv, ref), 1e-4);
  }
  OwnedTensor w_bad = random_tensor(DType::f32, Shape{heads, rows, k + 1}, 3);
  OwnedTensor x = random_tensor(DType::f32, Shape{n, heads, k}, 4);
  OwnedTensor y(DType::f32, Shape{n, heads, rows}, Device::cpu());
  EXPECT_THROW(linear_per_head(ctx, x, w_bad, y), Error);
}

}  // namespace
}  // namespace dspark
