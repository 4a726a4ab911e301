// Gated activations and element-wise arithmetic.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

// out[r, j] = silu(gate[r, j]) * up[r, j]     gate, up, out: [n, I], rows contiguous (gate and up
// may be the two halves of one fused [n, 2I] projection); any float dtypes; computed in f32.
void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out);

// out = a + b, element-wise over [n, D] (rows contiguous); any float dtypes; out may alias a or b.
void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);

// out = convert(src): same shape, any float dtypes (rows contiguous).
void convert(Context& ctx, const Tensor& src, const Tensor& out);

}  // namespace dspark
