// Argument checks and device dispatch of the FP8 projections (contract: ops/linear_fp8.h).
#include "dspark/ops/linear_fp8.h"

#include <cmath>
#include <vector>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/core/buffer.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

void check_fp8_weight(const char* op, const Tensor& w8, const Tensor& scale, const Context& ctx) {
  check_rank(op, "w8", w8, 2);
  check_dtype(op, "w8", w8, DType::u8);
  check_contiguous(op, "w8", w8);
  check_vector(op, "scale", scale, DType::f32, w8.size(0));
  check_on_device(op, "w8", w8, ctx);
  check_on_device(op, "scale", scale, ctx);
}

}  // namespace

void quantize_rows_fp8(Context& ctx, const Tensor& w, const Tensor& w8, const Tensor& scale) {
  constexpr const char* kOp = "quantize_rows_fp8";
  check_rank(kOp, "w", w, 2);
  check_float(kOp, "w", w);
  check_contiguous(kOp, "w", w);
  check_on_device(kOp, "w", w, ctx);
  check_fp8_weight(kOp, w8, scale, ctx);
  check_shape(kOp, "w8", w8, w.shape());
  const int64_t n = w.size(0), k = w.size(1);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::quantize_rows_fp8(ctx, w, w8, scale));
    return;
  }
  const std::vector<float> v = to_f32_vector(w);
  auto* q = static_cast<uint8_t*>(w8.data());
  auto* s = static_cast<float*>(scale.data());
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      amax = std::fmax(amax, std::fabs(v[static_cast<size_t>(i * k + j)]));
    s[i] = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t j = 0; j < k; ++j)
      q[i * k + j] = f32_to_e4m3(v[static_cast<size_t>(i * k + j)] / s[i]);
  }
}

void linear_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const Tensor& scale,
                const Tensor& bias, const Tensor& y) {
  constexpr const char* kOp = "linear_fp8";
  check_rank(kOp, "x", x, 2);
  check_float(kOp, "x", x);
  check_float(kOp, "y", y);
  check_rows_contiguous(kOp, "x", x);
  check_rows_contiguous(kOp, "y", y);
  check_on_device(kOp, "x", x, ctx);
  check_on_device(kOp, "y", y, ctx);
  check_fp8_weight(kOp, w8, scale, ctx);
  const int64_t m = x.size(0), k = x.size(1), n = w8.size(0);
  DSPARK_CHECK(w8.size(1) == k, "{}: x {} and w8 {} disagree on in_features", kOp, x.describe(),
               w8.describe());
  check_shape(kOp, "y", y, Shape{m, n});
  check_optional_vector(kOp, "bias", bias, n, ctx);
  if (m == 0 || n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_CHECK_KIND(unsupported, x.dtype() == DType::bf16 && k % 16 == 0,
                      "{} on CUDA: x must be bf16 with in_features a multiple of 16, got {}", kOp,
                      x.describe());
    DSPARK_CHECK_KIND(unsupported, y.dtype() == DType::f32 || y.dtype() == DType::bf16,
                      "{} on CUDA: y must be f32 or bf16, got {}", kOp, y.describe());
    DSPARK_ON_CUDA(cuda::linear_fp8(ctx, x, w8, scale, bias, y));
    return;
  }
  // The CPU reference: f32 sums of x * e4m3(w8) in k order, then the row's scale and the bias.
  const std::vector<float> xv = to_f32_vector(x);
  const std::vector<float> bv = bias.defined() ? to_f32_vector(bias) : std::vector<float>();
  const auto* q = static_cast<const uint8_t*>(w8.data());
  const auto* s = static_cast<const float*>(scale.data());
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = e4m3_to_f32(static_cast<uint8_t>(c));
  const int64_t ldy = m <= 1 ? n : y.stride(0);
  dispatch_float(y.dtype(), [&]<typename T>(TypeTag<T>) {
    T* out = static_cast<T*>(y.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t t = 0; t < k; ++t)
          acc += xv[static_cast<size_t>(i * k + t)] * table[q[j * k + t]];
        const float b = bv.empty() ? 0.0f : bv[static_cast<size_t>(j)];
        out[i * ldy + j] = from_f32<T>(acc * s[j] + b);
      }
  });
}

void project(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
             const Tensor& bias, const Tensor& y) {
  if (scale.defined())
    linear_fp8(ctx, x, w, scale, bias, y);
  else
    linear(ctx, x, w, bias, y);
}

}  // namespace dspark
