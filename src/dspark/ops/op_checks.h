// Internal to ops/*.cpp: argument checks shared by the op wrappers (on top of the check_* helpers
// of core/tensor.h). Every failure goes through DSPARK_CHECK with the op name first.
#pragma once

#include <span>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/quant.h"
#include "dspark/core/tensor.h"
#include "dspark/ops/norm.h"

namespace dspark::ops_internal {

// `t` lives on the context's device.
inline void check_on_device(const char* op, const char* name, const Tensor& t, const Context& ctx) {
  DSPARK_CHECK(t.device() == ctx.device(), "{}: {} is on {}, the context on {}", op, name,
               t.device().name(), ctx.device().name());
}

inline void check_float(const char* op, const char* name, const Tensor& t) {
  DSPARK_CHECK(dtype_is_float(t.dtype()), "{}: {} must be f32/bf16/f16, got {}", op, name,
               t.describe());
}

// Last dim contiguous (row strides may be wider).
inline void check_rows_contiguous(const char* op, const char* name, const Tensor& t) {
  DSPARK_CHECK(t.rows_contiguous(), "{}: {} must have a contiguous last dim, got strides {}", op,
               name, t.strides().str());
}

// A 1-D contiguous vector of `n` elements of `dtype` (n < 0: any length).
inline void check_vector(const char* op, const char* name, const Tensor& t, DType dtype,
                         int64_t n) {
  check_rank(op, name, t, 1);
  check_dtype(op, name, t, dtype);
  if (n >= 0) check_shape(op, name, t, Shape{n});
  DSPARK_CHECK(t.size(0) <= 1 || t.stride(0) == 1, "{}: {} must be contiguous, got stride {}", op,
               name, t.stride(0));
}

// An optional (possibly undefined) float vector of `n` elements on ctx's device, e.g. a bias.
inline void check_optional_vector(const char* op, const char* name, const Tensor& t, int64_t n,
                                  const Context& ctx) {
  if (!t.defined()) return;
  check_float(op, name, t);
  check_vector(op, name, t, t.dtype(), n);
  check_on_device(op, name, t, ctx);
}

// `t` viewed as [rows, cols] with cols = the last dim: rank 1 -> [1, n]; rank 2 as is; higher ranks
// when the leading dims collapse into one strided dim. The last dim must be contiguous.
inline Tensor as_rows(const char* op, const char* name, const Tensor& t) {
  DSPARK_CHECK(t.dim() >= 1, "{}: {} must have rank >= 1, got {}", op, name, t.describe());
  check_rows_contiguous(op, name, t);
  const int64_t cols = t.size(-1);
  if (t.dim() == 1) return Tensor(t.data(), t.dtype(), Shape{1, cols}, Shape{cols, 1}, t.device());
  if (t.dim() == 2)
    return Tensor(t.data(), t.dtype(), t.shape(), Shape{t.stride(0), 1}, t.device());
  int64_t rows = 1;
  for (int d = 0; d < t.dim() - 1; ++d) rows *= t.size(d);
  // Leading dims collapse when each stride equals the next one times the next size (ignoring
  // dims of size 1, whose strides are meaningless).
  int64_t row_stride = 0;
  bool have = false;
  for (int d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!have) {
      row_stride = t.stride(d);
      have = true;
      continue;
    }
    int64_t inner = 1;
    for (int e = d + 1; e < t.dim() - 1; ++e) inner *= t.size(e);
    DSPARK_CHECK(t.stride(d) == row_stride * inner,
                 "{}: {} must be viewable as [rows, {}] (strides {} do not collapse)", op, name,
                 cols, t.strides().str());
  }
  if (!have) row_stride = cols;
  return Tensor(t.data(), t.dtype(), Shape{rows, cols}, Shape{row_stride, 1}, t.device());
}

// A quantized weight matrix on ctx's device: WeightFormat::blocks (or blocks_x8 on the CPU; the
// MLX group types Q4_A64 ... on the CPU only), data u8 [n, row bytes of k] contiguous, k a multiple
// of the block's values; or WeightFormat::fp8_blocks, data u8 [n, k] contiguous and scales f32
// [ceil(n / block_n), ceil(k / block_k)] contiguous.
inline void check_weight_matrix(const Context& ctx, const char* op, const char* name,
                                const WeightMatrix& w) {
  check_rank(op, name, w.data, 2);
  check_dtype(op, name, w.data, DType::u8);
  DSPARK_CHECK(w.data.is_contiguous(), "{}: {}'s blocks must be contiguous", op, name);
  check_on_device(op, name, w.data, ctx);
  if (w.format == WeightFormat::fp8_blocks) {
    DSPARK_CHECK(w.block_n > 0 && w.block_k > 0, "{}: {} has FP8 blocks of {}x{}", op, name,
                 w.block_n, w.block_k);
    check_shape(op, name, w.data, Shape{w.n, w.k});
    const Shape scales{(w.n + w.block_n - 1) / w.block_n, (w.k + w.block_k - 1) / w.block_k};
    check_dtype(op, "scales", w.scales, DType::f32);
    check_shape(op, "scales", w.scales, scales);
    DSPARK_CHECK(w.scales.is_contiguous(), "{}: {}'s scales must be contiguous", op, name);
    check_on_device(op, "scales", w.scales, ctx);
    return;
  }
  DSPARK_CHECK(w.format == WeightFormat::blocks || w.format == WeightFormat::blocks_x8,
               "{}: {} has an unknown weight format", op, name);
  DSPARK_CHECK_KIND(unsupported, w.format != WeightFormat::blocks_x8 || !ctx.is_cuda(),
                    "{}: {} is in the CPU's interleaved layout", op, name);
  DSPARK_CHECK_KIND(unsupported, !ctx.is_cuda() || quant_unit_type(w.quant) == w.quant,
                    "{}: {} is in {} blocks, which CUDA takes only expanded to {} blocks "
                    "(expand_quant_groups)",
                    op, name, quant_type_name(w.quant), quant_type_name(quant_unit_type(w.quant)));
  const QuantBlock b = quant_block(w.quant);
  DSPARK_CHECK(w.n >= 0 && w.k >= 0 && w.k % b.elements == 0,
               "{}: {} [{}, {}] of {} blocks: the row length must be a multiple of {}", op, name,
               w.n, w.k, quant_type_name(w.quant), b.elements);
  check_shape(op, name, w.data, Shape{w.n, w.k / b.elements * b.bytes});
}

// The params span holds one entry per row or one for all rows.
template <typename T>
void check_per_row(const char* op, const char* name, std::span<const T> values, int64_t n_rows,
                   bool allow_one) {
  const auto size = static_cast<int64_t>(values.size());
  DSPARK_CHECK(size == n_rows || (allow_one && size == 1), "{}: {} has {} entries for {} rows{}",
               op, name, size, n_rows, allow_one ? " (expected 1 or one per row)" : "");
}

// The argument checks of linear (ops/matmul.h; matmul.cpp) and add_rms_norm (ops/norm.h;
// norm.cpp), for the ops that fuse them (ops/linear_norm.h).
void check_linear_args(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Tensor& y);
void check_add_rms_norm_args(const Context& ctx, const Tensor& residual, const Tensor& x,
                             const Tensor& weight, const Tensor& out, const RmsNormParams& params);

}  // namespace dspark::ops_internal
