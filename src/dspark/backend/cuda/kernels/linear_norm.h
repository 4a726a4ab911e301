// Internal to backend/cuda/kernels: the two halves of linear_add_rms_norm's K-split path
// (linear_norm.cu): the one-pass add_rms_norm kernel fed with the sums of a K split's f32 partial
// products instead of a row of x (norm.cu).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

// Whether add_rms_norm_split_sums takes these rows: residual and y f32 with 16-byte aligned rows
// and the columns a multiple of 4, and rows short enough for the one-pass kernel.
bool add_rms_norm_split_sums_fits(const Tensor& residual, const Tensor& y);

// Whether add_rms_norm_split_sums writes `copy` itself: a bf16 copy of these rows with 8-byte
// aligned rows.
bool add_rms_norm_split_sums_copies(const Tensor& residual, const Tensor& copy);

// y[r, c] = sum over s < splits (2..kLinearNormMaxSplits, policy/linear.h, in order) of
// part[s][r][c]; then add_rms_norm(residual, y,
// weight, out, params). part: f32 [splits][rows][cols] on the device; the arguments as
// add_rms_norm_split_sums_fits accepts them. An undefined y: the sums are not stored. A defined
// copy (as add_rms_norm_split_sums_copies accepts it): copy = bf16(the updated residual), the
// bits of convert. One PDL launch.
void add_rms_norm_split_sums(Context& ctx, const Tensor& residual, const float* part, int splits,
                             const Tensor& y, const Tensor& weight, const Tensor& out,
                             const RmsNormParams& params, const Tensor& copy = Tensor{});

}  // namespace dspark::cuda
