// A projection followed by the residual add and RMSNorm that consume it: the o and down
// projections of a transformer block (model/layers.h).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"
#include "dspark/ops/norm.h"

namespace dspark {

// LinearNormExtras (backend/op_params.h): residual_copy (also write the updated residual in that
// tensor's dtype: a model's hidden-state tap) and keep_y (false: y is scratch).

// y = x . w^T; residual += y; out = rms_norm(residual) * weight
//   The values of linear(ctx, x, w, {}, y) then add_rms_norm(ctx, residual, y, weight, out,
//   params), with those ops' shapes and dtypes (x [M, K], w [N, K], y / residual / out [M, N]).
//   CUDA: for a few rows with 16-bit x and w and an f32 y, one K-split GEMM into f32 partial sums
//   whose sums the norm kernel forms (backend/cuda/kernels/linear_norm.cu): y then agrees
//   with linear's to f32 rounding (another order of the additions), not bit for bit.
void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params, const LinearNormExtras& extras = {});

}  // namespace dspark
