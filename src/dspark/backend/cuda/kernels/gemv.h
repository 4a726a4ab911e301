// The hand-written 16-bit linear kernels, private to backend/cuda/kernels: linear() runs them when
// choose_linear (policy/linear.h) picks them.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/linear.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

// The policy's view of a linear call (the `aligned` flag from the tensors' layout).
LinearShape linear_shape(const Tensor& x, const Tensor& w, const Tensor& y);

// y[N] = x[K] . w[N, K]^T (+ bias) for a call that choose_linear gave to the one-row kernel, in
// CTAs of 8 warps (half) or 16.
void linear_one_row(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Tensor& y, bool half_ctas);

// y[M, N] = x[M, K] . w[N, K]^T (+ bias) with the bits of each row independent of M
// (gemv_invariant.cu), for a call that choose_linear gave to the batch-invariant kernel.
void linear_invariant(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& y);

}  // namespace dspark::cuda
