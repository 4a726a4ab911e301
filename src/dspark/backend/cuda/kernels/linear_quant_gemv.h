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

// One of the two products of linear_blocks_gemv_pair: y = x . dequantize(*w)^T (+ bias), as
// `plan` cuts it.
struct GemvPart {
  const WeightMatrix* w;
  Tensor bias;
  Tensor y;
  QuantGemvPlan plan;
};

// Both products of one x of 1..kQuantGemvMaxRows rows in one launch, each with the bits of its
// own linear_blocks_gemv, where a's and b's types differ and are a pair the kernel is built for
// (Q4_K / Q6_K, Q5_K / Q6_K, Q4_K / Q5_K); false (nothing launched) otherwise.
bool linear_blocks_gemv_pair(Context& ctx, const Tensor& x, const GemvPart& a, const GemvPart& b);

// out[m, I] = swiglu(x . dequantize(w)^T) for w of 2I rows (gate rows, then up rows), planned as
// the product of all 2I rows: the bits of linear_blocks_gemv into a [m, 2I] tensor of out's dtype
// then the swiglu op, in one launch. Only where gemv_swiglu_fits (an even row count; tiles of at
// least two weight rows).
bool gemv_swiglu_fits(const WeightMatrix& w, const QuantGemvPlan& plan);
void linear_blocks_gemv_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w,
                               const Tensor& out, const QuantGemvPlan& plan);

}  // namespace dspark::cuda
