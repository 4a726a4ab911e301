// RMSNorm, plain and (1 + w) ("unit offset", Gemma) variants, and the fused residual-add form;
// LayerNorm.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// RmsNormParams (backend/op_params.h): eps, and unit_offset (scale by (1 + w) instead of w).

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w    (computed in f32)
//   x: [n, D] any float dtype, rows contiguous (row stride may exceed D); w: [D] any float dtype;
//   out: [n, D] any float dtype, may alias x. For per-head norms pass x viewed as [n*heads, D], or
//   as [n, heads, D] (x and out with the same shape; the token stride may exceed heads*D, e.g. the
//   q or k part of a fused QKV output: such a view is normalised head by head).
void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params);

// out[r, :] = (x[r, :] - mean) / sqrt(var + eps) * w + b   (LayerNorm, biased variance, in f32)
//   x: [n, D] any float dtype, rows contiguous; weight, bias: [D] any float dtype; out: [n, D]
//   any float dtype, may alias x. (DeepSeek sparse attention's indexer keys.)
void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& out, float eps);

// residual[r, :] += x[r, :]; out[r, :] = rms_norm(residual[r, :])   (one pass)
//   residual: [n, D] (f32 or the activation dtype, updated in place); x: [n, D]; out: [n, D].
void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params);

}  // namespace dspark
