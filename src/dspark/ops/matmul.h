// Dense projections. The HF Linear convention: a weight is [out_features, in_features].
#pragma once

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

// y[M, N] = x[M, K] . w[N, K]^T (+ bias[N])     accumulation in f32
//   CPU: any float dtypes (bf16/f16 converted to f32); M <= 32 through dspark's small-M kernel
//   (backend/cpu/kernels/small_m_gemm.h: batch invariant), larger M through OpenBLAS sgemm;
//   CUDA: x and w of the same 16-bit dtype (bf16 or f16) or both f32; y f32 or the input dtype;
//   cuBLASLt (or, opt-in, the small-M tensor-core kernel). x and y rows contiguous (row strides may
//   exceed K / N: slices of wider buffers); w contiguous. bias (optional, may be an undefined
//   Tensor) [N] any float dtype. y must not overlap x (checked conservatively: the address ranges
//   spanned by their rows must not meet).
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);

}  // namespace dspark
