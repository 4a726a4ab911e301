// The few-row kernel of linear with block-quantized weights (linear_quant_gemv.cu), private to
// backend/cuda/kernels: linear_blocks (linear_quant.cu) calls it when choose_linear_blocks picks
// LinearBlocksKernel::gemv.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/linear_quant.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

// y[m, n] = x[m, k] . dequantize(w)^T (+ bias) for m >= 1, as `plan` cuts it
// (choose_linear_blocks); above kQuantGemvMaxRows rows, chunks of that many rows, each row with the
// bits it has alone. A programmatic launch on ctx's stream.
void linear_blocks_gemv(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                        const Tensor& y, const QuantGemvPlan& plan);

// out[m, I] = swiglu(x . dequantize(w)^T) for w of 2I rows (gate rows, then up rows), planned as
// the product of all 2I rows: the bits of linear_blocks_gemv into a [m, 2I] tensor of out's dtype
// then the swiglu op, in one launch. Only where gemv_swiglu_fits (an even row count; tiles of at
// least two weight rows).
bool gemv_swiglu_fits(const WeightMatrix& w, const QuantGemvPlan& plan);
void linear_blocks_gemv_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w,
                               const Tensor& out, const QuantGemvPlan& plan);

// The residual add and RMSNorm that follow a product (ops/linear_norm.h): add_rms_norm(residual,
// y, weight, out, params) as its one-pass kernel runs it with `threads` threads of `per_thread`
// vectors of 4 (choose_add_rms_norm's plan, without a cluster), then copy = bf16(residual) where
// copy is defined. `counter`: one zeroed arrival counter (arrival_counters).
struct GemvAddNorm {
  Tensor residual, weight, out, copy;
  RmsNormParams params;
  int threads = 0, per_thread = 0;
  unsigned* counter = nullptr;
};

// linear_blocks_gemv into y (f32), then GemvAddNorm's op on y's rows, in one launch: the bits of
// the product then add_rms_norm (and convert for the copy). At most kQuantGemvMaxRows rows; the
// tensors as add_rms_norm_split_sums_fits / _copies (linear_norm.h) accept them.
void linear_blocks_gemv_add_rms_norm(Context& ctx, const Tensor& x, const WeightMatrix& w,
                                     const Tensor& y, const GemvAddNorm& a,
                                     const QuantGemvPlan& plan);

}  // namespace dspark::cuda
