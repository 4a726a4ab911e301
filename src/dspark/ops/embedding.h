// Row gather (embedding lookup).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// out[i, :] = table[ids[i], :]
//   table: [V, H] f32/bf16/f16 (rows contiguous), ids: i32 [n] (values in [0, V), checked on the
//   CPU; out-of-range ids on CUDA produce zeros), out: [n, H] any float dtype (converted).
void gather_rows(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out);
// The same for a table in any stored format (WeightMatrix): block-quantized rows are
// dequantized (core/quant.h's reference values) into out.
void gather_rows(Context& ctx, const WeightMatrix& table, const Tensor& ids, const Tensor& out);
inline void embedding(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out) {
  gather_rows(ctx, table, ids, out);
}

}  // namespace dspark
