// rms_norm and add_rms_norm against a naive double-precision reference.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/norm.h"

namespace dspark {
namespace {

using test::make_tensor;
using test::random_normal;
using test::random_tensor;
using test::relative_rms_error;

// f32 output: relative RMS error <= 1e-5; 16-bit output: the output's own rounding (<= 2^-9
// relative per element for bf16) dominates.
double norm_tolerance(DType out) {
  return out == DType::f32 ? 1e-5 : 4e-3;
}

// y[r, :] = x[r, :] / sqrt(mean(x^2) + eps) * (w or 1 + w), in double.
std::vector<float> rms_norm_reference(const std::vector<float>& x, const std::vector<float>& w,
                                      int64_t n, int64_t d, double eps, bool unit_offset) {
  std::vector<float> y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[r * d + j]) * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      const double scale = unit_offset ? 1.0 + w[j] : w[j];
      y[r * d + j] = static_cast<float>(x[r * d + j] * inv * scale);
    }
  }
  return y;
}

using test::rounded;

TEST(OpsNorm, RmsNormShapesDtypesStrides) {
  Context ctx(Device::cpu());
  int cases = 0;
  for (int64_t d : {1, 3, 17, 127, 4099}) {
    for (int64_t n : {1, 3, 33}) {
      for (DType x_dtype : {DType::f32, DType::bf16, DType::f16}) {
        for (DType out_dtype : {DType::f32, DType::bf16}) {
          for (bool unit_offset : {false, true}) {
            SCOPED_TRACE(fmt::format("n={} d={} x={} out={} unit_offset={}", n, d,
                                     dtype_name(x_dtype), dtype_name(out_dtype), unit_offset));
            const int64_t pad = (n + d) % 3 == 0 ? 0 : 7;  // row stride d + pad
            OwnedTensor x_buf = random_tensor(x_dtype, Shape{n, d + pad}, 100 + d + n, 2.0f);
            const Tensor x = x_buf.view().slice(1, 0, d);
            OwnedTensor w = random_tensor(DType::bf16, Shape{d}, 7 + d, 0.5f);
            OwnedTensor out_buf = OwnedTensor::zeros(out_dtype, Shape{n, d + 3}, Device::cpu());
            const Tensor out = out_buf.view().slice(1, 0, d);
            RmsNormParams params;
            params.eps = 1e-5f;
            params.unit_offset = unit_offset;
            rms_norm(ctx, x, w, out, params);
            const auto ref = rms_norm_reference(to_f32_vector(x), to_f32_vector(w), n, d,
                                                params.eps, unit_offset);
            EXPECT_LE(relative_rms_error(to_f32_vector(out), ref), norm_tolerance(out_dtype));
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 180);
}

// Small activations, where eps dominates the mean square.
TEST(OpsNorm, RmsNormEpsMatters) {
  Context ctx(Device::cpu());
  OwnedTensor x = random_tensor(DType::f32, Shape{4, 96}, 12, 1e-3f);
  OwnedTensor w = random_tensor(DType::f32, Shape{96}, 13);
  OwnedTensor out(DType::f32, Shape{4, 96}, Device::cpu());
  for (float eps : {1e-6f, 1e-5f, 1e-3f}) {
    rms_norm(ctx, x, w, out, RmsNormParams{eps, false});
    const auto ref = rms_norm_reference(to_f32_vector(x), to_f32_vector(w), 4, 96, eps, false);
    EXPECT_LE(relative_rms_error(to_f32_vector(out), ref), 1e-5) << eps;
  }
}

TEST(OpsNorm, RmsNormInPlace) {
  Context ctx(Device::cpu());
  for (DType dtype : {DType::f32, DType::bf16}) {
    OwnedTensor x = random_tensor(dtype, Shape{5, 64}, 3);
    OwnedTensor w = random_tensor(DType::f32, Shape{64}, 4);
    const auto ref = rms_norm_reference(to_f32_vector(x), to_f32_vector(w), 5, 64, 1e-6, false);
    rms_norm(ctx, x, w, x, RmsNormParams{});
    EXPECT_LE(relative_rms_error(to_f32_vector(x), ref), norm_tolerance(dtype));
  }
}

// Per-head norm (Qwen3 q_norm) of the q part of a fused QKV projection: a [n, heads, D] view whose
// token stride is the full QKV width, so it does not collapse to [n * heads, D].
TEST(OpsNorm, RmsNormPerHeadOfAFusedProjection) {
  Context ctx(Device::cpu());
  const int64_t n = 7, heads = 4, kv_heads = 2, d = 32, width = (heads + 2 * kv_heads) * d;
  for (DType dtype : {DType::f32, DType::bf16}) {
    OwnedTensor qkv = random_tensor(dtype, Shape{n, width}, 21, 3.0f);
    const std::vector<float> before = to_f32_vector(qkv);
    const Tensor q =
        Tensor(qkv.view().data(), dtype, Shape{n, heads, d}, Shape{width, d, 1}, Device::cpu());
    OwnedTensor w = random_tensor(DType::f32, Shape{d}, 22);
    rms_norm(ctx, q, w, q, RmsNormParams{});
    const std::vector<float> after = to_f32_vector(qkv);
    const std::vector<float> wv = to_f32_vector(w);
    std::vector<float> got, ref_in;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < heads * d; ++j) {
        got.push_back(after[t * width + j]);
        ref_in.push_back(before[t * width + j]);
      }
    EXPECT_LE(relative_rms_error(got, rms_norm_reference(ref_in, wv, n * heads, d, 1e-6, false)),
              norm_tolerance(dtype));
    for (int64_t t = 0; t < n; ++t)  // k and v untouched
      for (int64_t j = heads * d; j < width; ++j)
        ASSERT_EQ(after[t * width + j], before[t * width + j]);
  }
}

TEST(OpsNorm, AddRmsNorm) {
  Context ctx(Device::cpu());
  for (int64_t d : {1, 17, 127, 4099}) {
    for (int64_t n : {1, 3, 33}) {
      for (DType res_dtype : {DType::f32, DType::bf16}) {
        for (DType x_dtype : {DType::f32, DType::bf16}) {
          for (DType out_dtype : {DType::f32, DType::bf16}) {
            SCOPED_TRACE(fmt::format("n={} d={} res={} x={} out={}", n, d, dtype_name(res_dtype),
                                     dtype_name(x_dtype), dtype_name(out_dtype)));
            OwnedTensor res_buf = random_tensor(res_dtype, Shape{n, d + 2}, 5 + d, 4.0f);
            const Tensor res = res_buf.view().slice(1, 0, d);
            OwnedTensor x = random_tensor(x_dtype, Shape{n, d}, 6 + n);
            OwnedTensor w = random_tensor(DType::f32, Shape{d}, 8);
            OwnedTensor out(out_dtype, Shape{n, d}, Device::cpu());
            const std::vector<float> r0 = to_f32_vector(res), xv = to_f32_vector(x);
            add_rms_norm(ctx, res, x, w, out, RmsNormParams{1e-6f, false});
            // The residual becomes round(res + x) in its dtype; the norm reads that value.
            std::vector<float> sum(r0.size());
            for (size_t i = 0; i < sum.size(); ++i)
              sum[i] = rounded(static_cast<float>(static_cast<double>(r0[i]) + xv[i]), res_dtype);
            EXPECT_EQ(to_f32_vector(res), sum);
            const auto ref = rms_norm_reference(sum, to_f32_vector(w), n, d, 1e-6, false);
            EXPECT_LE(relative_rms_error(to_f32_vector(out), ref), norm_tolerance(out_dtype));
          }
        }
      }
    }
  }
}

TEST(OpsNorm, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor x = random_tensor(DType::f32, Shape{4, 8}, 1);
  OwnedTensor w = random_tensor(DType::f32, Shape{8}, 2);
  OwnedTensor w_bad = random_tensor(DType::f32, Shape{7}, 2);
  OwnedTensor out(DType::f32, Shape{4, 8}, Device::cpu());
  OwnedTensor out_bad(DType::f32, Shape{3, 8}, Device::cpu());
  OwnedTensor out_int(DType::i32, Shape{4, 8}, Device::cpu());
  EXPECT_THROW(rms_norm(ctx, x, w_bad, out, {}), Error);
  EXPECT_THROW(rms_norm(ctx, x, w, out_bad, {}), Error);
  EXPECT_THROW(rms_norm(ctx, x, w, out_int, {}), Error);
  EXPECT_THROW(rms_norm(ctx, x, w, out, RmsNormParams{-1.0f, false}), Error);
  // last dim not contiguous
  const Tensor x_t(x.view().data(), DType::f32, Shape{8, 4}, Shape{1, 8}, Device::cpu());
  OwnedTensor out_t(DType::f32, Shape{8, 4}, Device::cpu());
  OwnedTensor w4 = random_tensor(DType::f32, Shape{4}, 2);
  EXPECT_THROW(rms_norm(ctx, x_t, w4, out_t, {}), Error);
  EXPECT_THROW(add_rms_norm(ctx, x, x, w, x, {}), Error);  // out aliases residual
  OwnedTensor x3 = random_tensor(DType::f32, Shape{3, 8}, 1);
  EXPECT_THROW(add_rms_norm(ctx, x, x3, w, out, {}), Error);
  try {
    rms_norm(ctx, x, w_bad, out, {});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dspark
