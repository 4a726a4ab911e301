// FP8 (E4M3) weights on the CPU (contract: ops/linear_fp8.h): the code conversion against the
// format's definition, per-row quantization, and the reference projection. The CUDA kernels are
// checked against these in tests/cuda/linear_fp8_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/linear_fp8.h"

namespace dspark {
namespace {

TEST(OpsLinearFp8, E4m3CodesRoundTripAndRoundToNearestEven) {
  // Every finite code decodes to a value that encodes back to it (-0 included); NaN codes.
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_to_f32(code)));
      continue;
    }
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(code)), code) << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0xB8), -1.0f);
  // Saturation, NaN, ties to even (1.0625 is halfway between 1 and 1.125: even mantissa 0).
  EXPECT_EQ(f32_to_e4m3(1e9f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-500.0f), 0xFE);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);  // halfway between 1.125 (odd) and 1.25 (even)
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -9)), 0x02);  // subnormal tie: 1.5 units -> 2
  EXPECT_EQ(f32_to_e4m3(std::ldexp(0.5f, -9)), 0x00);  // 0.5 units -> 0 (even)
  // Every value rounds to a nearest code.
  for (float v = -460.0f; v < 460.0f; v += 0.37f) {
    const float q = e4m3_to_f32(f32_to_e4m3(v));
    for (int c = 0; c < 256; ++c) {
      const float other = e4m3_to_f32(static_cast<uint8_t>(c));
      if (!std::isnan(other) && std::fabs(v) <= 448.0f) {
        ASSERT_LE(std::fabs(q - v), std::fabs(other - v)) << v << " code " << c;
      }
    }
  }
}

TEST(OpsLinearFp8, QuantizedProjectionIsCloseToTheFullPrecisionOne) {
  Context ctx(Device::cpu());
  const int64_t m = 3, n = 20, k = 48;
  OwnedTensor w = test::random_tensor(DType::f32, Shape{n, k}, 7);
  auto* wp = static_cast<float*>(w.view().data());
  for (int64_t j = 0; j < k; ++j) wp[5 * k + j] = 0.0f;  // an all-zero row: scale 1, codes 0
  const OwnedTensor x = test::random_tensor(DType::f32, Shape{m, k}, 8);
  const OwnedTensor bias = test::random_tensor(DType::f32, Shape{n}, 9);
  const OwnedTensor w8(DType::u8, Shape{n, k}, Device::cpu());
  const OwnedTensor scale(DType::f32, Shape{n}, Device::cpu());
  quantize_rows_fp8(ctx, w, w8, scale);
  const std::vector<float> s = to_f32_vector(scale);
  const auto* q = static_cast<const uint8_t*>(w8.view().data());
  EXPECT_EQ(s[5], 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::fmax(amax, std::fabs(wp[i * k + j]));
    if (i != 5) {
      EXPECT_EQ(s[static_cast<size_t>(i)], amax / 448.0f);
    }
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(q[i * k + j], f32_to_e4m3(wp[i * k + j] / s[static_cast<size_t>(i)]));
      // E4M3 keeps 3 mantissa bits: within 1/16 of the value (or of the subnormal step).
      const float back = e4m3_to_f32(q[i * k + j]) * s[static_cast<size_t>(i)];
      EXPECT_LE(std::fabs(back - wp[i * k + j]),
                std::fabs(wp[i * k + j]) / 16 + s[static_cast<size_t>(i)] * 0x1p-10f);
    }
  }
  const OwnedTensor y(DType::f32, Shape{m, n}, Device::cpu());
  linear_fp8(ctx, x, w8, scale, bias, y);
  const std::vector<float> yv = to_f32_vector(y), xv = to_f32_vector(x), bv = to_f32_vector(bias);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double exact = bv[static_cast<size_t>(j)], deq = exact, mag = 0;
      for (int64_t t = 0; t < k; ++t) {
        const double xt = xv[static_cast<size_t>(i * k + t)];
        exact += xt * wp[j * k + t];
        deq += xt * e4m3_to_f32(q[j * k + t]) * s[static_cast<size_t>(j)];
        mag += std::fabs(xt * wp[j * k + t]);
      }
      EXPECT_NEAR(yv[static_cast<size_t>(i * n + j)], deq, 1e-5 * (1 + mag));
      EXPECT_NEAR(yv[static_cast<size_t>(i * n + j)], exact, mag / 16 + 1e-5);
    }
  // Argument checks: the weight must be u8 codes with one scale per row.
  const OwnedTensor w8_f32(DType::f32, Shape{n, k}, Device::cpu());
  EXPECT_THROW(linear_fp8(ctx, x, w8_f32, scale, bias, y), Error);
  const OwnedTensor short_scale(DType::f32, Shape{n - 1}, Device::cpu());
  EXPECT_THROW(linear_fp8(ctx, x, w8, short_scale, bias, y), Error);
  const OwnedTensor x_short = test::random_tensor(DType::f32, Shape{m, k - 1}, 10);
  EXPECT_THROW(linear_fp8(ctx, x_short, w8, scale, bias, y), Error);
}

}  // namespace
}  // namespace dspark
