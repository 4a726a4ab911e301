// linear_add_rms_norm on CUDA (ops/linear_norm.h).
//
// In a verify forward (17 rows) cuBLASLt runs the o and down projections as a split-K GEMM plus
// its own reduce kernel (~2 us each), and add_rms_norm follows as a third kernel. Here, when
// choose_linear_norm_splits (policy/linear.h) says so (2..48 rows by default), the GEMM is a
// strided batch over S slices of K into f32 partial sums, batch b multiplying columns
// [b K / S, (b + 1) K / S) of w and x (S times the CTAs of an unsplit GEMM for the same weight
// bytes), in the top half of the cuBLASLt workspace (the GEMM gets the bottom half);
// add_rms_norm's one-pass kernel then adds the S partials in K order as its x, writes that sum to
// y (what linear would have written, up to the order of the f32 additions) and goes on as
// add_rms_norm does. One reduce launch fewer per projection (~0.5 us less from the GEMM's end to
// the next GEMM's start on the H200). Deterministic: the order of the additions depends on the
// shape only.
#include <algorithm>
#include <cstdint>

#include "dspark/backend/cuda/blas.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/linear_norm.h"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/lt_plans.h"
#include "dspark/backend/cuda/policy/linear.h"

namespace dspark::cuda {
namespace {

// The bytes of the cuBLASLt workspace's top half, where the partial sums go.
size_t partial_bytes(const BlasLt& blas) {
  return blas.workspace_bytes() / 2 / 256 * 256;
}

// The K split's GEMM (choose_linear_norm_splits said so) into `part` (f32 [splits][m][n]).
float* split_k_gemm(Context& ctx, const Tensor& x, const Tensor& w, int splits) {
  const RowView xv = row_view(x);
  const int64_t m = xv.rows, k = xv.cols, n = w.size(0);
  BlasLt& blas = ctx.blas();
  const size_t half = partial_bytes(blas);
  const int64_t kc = k / splits;
  auto* part = reinterpret_cast<float*>(static_cast<char*>(blas.workspace()) + half);
  // Every batch's start keeps the alignment cuBLASLt is promised.
  const auto step = static_cast<uintptr_t>(kc) * dtype_size(x.dtype());
  const uint32_t step_align = pointer_alignment(reinterpret_cast<const void*>(step));
  const GemmKey key{
      current_device(),
      m,
      n,
      kc,
      xv.stride,
      n,
      static_cast<int>(x.dtype()),
      static_cast<int>(DType::f32),
      std::min(pointer_alignment(x.data()), step_align),
      std::min(pointer_alignment(w.data()), step_align),
      std::min(pointer_alignment(part),
               pointer_alignment(reinterpret_cast<const void*>(static_cast<uintptr_t>(m * n) * 4))),
      k,
      splits};
  // The GEMM gets the workspace's bottom half; the partial sums are in the top half.
  run_gemm(key, x.dtype(), DType::f32,
           LtOperands{static_cast<cublasLtHandle_t>(blas.handle()), w.data(), x.data(), part,
                      blas.workspace(), half, stream_of(ctx)});
  note_cublaslt_launch();
  return part;
}

}  // namespace

void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params, const LinearNormExtras& extras) {
  const int splits = choose_linear_norm_splits(
      linear_shape(x, w, y), w.is_contiguous(), add_rms_norm_split_sums_fits(residual, y),
      static_cast<int64_t>(partial_bytes(ctx.blas())), ctx.cuda_tuning());
  const Tensor& copy = extras.residual_copy;
  if (splits >= 2) {
    const float* part = split_k_gemm(ctx, x, w, splits);
    // The norm kernel writes the copy where it can (a bf16 copy of the f32 residual).
    const bool copy_in_kernel = copy.defined() && add_rms_norm_split_sums_copies(residual, copy);
    add_rms_norm_split_sums(ctx, residual, part, splits, extras.keep_y ? y : Tensor{}, weight, out,
                            params, copy_in_kernel ? copy : Tensor{});
    if (copy.defined() && !copy_in_kernel) cuda::convert(ctx, residual, copy);
    return;
  }
  cuda::linear(ctx, x, w, Tensor{}, y);  // qualified: not the op (argument-dependent lookup)
  cuda::add_rms_norm(ctx, residual, y, weight, out, params);
  if (copy.defined()) cuda::convert(ctx, residual, copy);
}

}  // namespace dspark::cuda
