// Which kernel runs linear and linear_add_rms_norm on CUDA (kernels/matmul.cu, gemv_m1.cu,
// linear_norm.cu): pure functions of the call's shape, dtypes and layout, and the context's
// tuning. Host-only (policy/device.h).
#pragma once

#include <cstdint>

#include "dspark/backend/cuda/policy/device.h"
#include "dspark/core/dtype.h"

namespace dspark::cuda {

// One linear call y[m, n] = x[m, k] . w[n, k]^T as the choice sees it.
struct LinearShape {
  int64_t m = 0, n = 0, k = 0;
  DType x = DType::f32, w = DType::f32, y = DType::f32;
  // w contiguous, x and w 16-byte aligned, and (with several rows) x's rows a multiple of 8
  // elements apart: what the hand-written kernels' 16-byte loads need.
  bool aligned = false;
};

enum class LinearKernel {
  cublaslt,      // any shape
  one_row,       // gemv_m1.cu, CTAs of 16 warps
  one_row_half,  // gemv_m1.cu, CTAs of 8 warps
  invariant,     // gemv_invariant.cu: any M, the same bits per row (Tuning::batch_invariant)
};

// The widest weight (N) the one-row kernel takes: an LM head stays on cuBLASLt, which streams it
// at the copy bandwidth (the one-row kernel is ~5% slower there).
inline constexpr int64_t kOneRowMaxN = 65536;
// The deepest K the one-row kernel takes: 4 chunks of 8 elements per lane, in CTAs of 16 warps
// (8 warps: half of it).
inline constexpr int64_t kOneRowMaxK = 16384;

// With t.batch_invariant: the batch-invariant kernel for 16-bit x and w of one dtype, y f32 or
// that dtype, K % 16 == 0, aligned, at any M (cuBLASLt otherwise, which is not invariant).
// Else the one-row kernel (decode steps) for one row of 16-bit x and w of one dtype, y f32 or that
// dtype, K % 8 == 0, K <= kOneRowMaxK, N <= kOneRowMaxN, aligned; cuBLASLt otherwise.
LinearKernel choose_linear(const LinearShape& s, const Tuning& t);

// The most slices of linear_add_rms_norm's K split (the norm kernel's instantiations).
inline constexpr int kLinearNormMaxSplits = 4;

// linear_add_rms_norm's K split: the number of slices of K (2..kLinearNormMaxSplits, from
// t.linear_norm_splits), or 0 for linear then
// add_rms_norm. Split when the rows are 2..t.linear_norm_max_rows, x and w 16-bit of one dtype,
// w contiguous, K a multiple of 8 x slices, N a multiple of 4, the partial sums fit
// `partial_bytes` (half the cuBLASLt workspace), and `norm_fits` (the norm kernel takes the f32
// residual and y rows: add_rms_norm_split_sums_fits); never with t.batch_invariant.
int choose_linear_norm_splits(const LinearShape& s, bool w_contiguous, bool norm_fits,
                              int64_t partial_bytes, const Tuning& t);

}  // namespace dspark::cuda
