// Rows of a block-quantized weight dequantized on the device (quant_rows.cu), private to
// backend/cuda/kernels: the prefill path of the quantized linear (linear_quant.cu) dequantizes
// chunks of weight rows into scratch with it; gather_rows_blocks is the same kernel with ids.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

// out[i, :] = dequantize(row row0 + i of w) for every row i of out ([rows, w.k], rows contiguous,
// any float dtype): f32 gives core/quant.h's reference values bit for bit, bf16 / f16 those
// rounded to nearest even. Rows past w.n give zeros. A plain launch on ctx's stream.
void dequantize_rows(Context& ctx, const WeightMatrix& w, int64_t row0, const Tensor& out);

}  // namespace dspark::cuda
