// linear_add_rms_norm on CUDA (ops/linear_norm.h; the switches: backend/cuda/kernels.h).
//
// In a verify forward (17 rows) cuBLASLt runs the o and down projections as a split-K GEMM plus
// its own reduce kernel (splitKreduce_kernel, ~2 us each), and add_rms_norm follows as a third
// kernel (session 12's timeline). Here, for 2..max rows, the GEMM is a strided batch over S slices
// of K into f32 partial sums, batch b multiplying columns [b K / S, (b + 1) K / S) of w and x (S
// times the CTAs of an unsplit GEMM for the same weight bytes), in the top half of the cuBLASLt
// workspace (the GEMM gets the bottom half); add_rms_norm's one-pass kernel then adds the S
// partials in K order as its x, writes that sum to y (what linear would have written, up to the
// order of the f32 additions) and goes on as add_rms_norm does. One reduce launch fewer per
// projection. Deterministic: the order of the additions depends on the shape only. Measured in
// session 16 (docs/perf-notes.md): ~0.5 us less from the GEMM's end to the next GEMM's start, the
// norm kernel now starting after the GEMM ends (cuBLASLt's batched kernel does not trigger its
// dependents early) and taking ~4.1 us.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "dspark/backend/cuda/blas.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/linear_norm.h"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/lt_plans.h"

namespace dspark::cuda {
namespace {

std::atomic<int>& splits_flag() {
  static std::atomic<int> n = std::clamp(
      env_count("DSPARK_LT_SPLIT_NORM", kLinearNormDefaultSplits), 0, kLinearNormMaxSplits);
  return n;
}

std::atomic<int>& max_rows_flag() {
  static std::atomic<int> n = env_count("DSPARK_LT_SPLIT_NORM_MAX_ROWS", 48);
  return n;
}

std::atomic<uint64_t>& launch_count() {
  static std::atomic<uint64_t> n{0};
  return n;
}

// The split count for a call of m rows, 0 for none.
int splits_for(int64_t m) {
  const int s = splits_flag().load();
  return s >= 2 && m >= 2 && m <= max_rows_flag().load() ? s : 0;
}

// The K split's GEMM into `part` (f32 [splits][m][n]); false, doing nothing, when the shapes,
// dtypes or alignments do not fit it.
bool split_k_gemm(Context& ctx, const Tensor& x, const Tensor& w, int splits, float*& part) {
  if (x.dtype() != DType::bf16 && x.dtype() != DType::f16) return false;
  if (w.dtype() != x.dtype() || !w.is_contiguous()) return false;
  const RowView xv = row_view(x);
  const int64_t m = xv.rows, k = xv.cols, n = w.size(0);
  if (k < 8 * splits || k % (8 * splits) != 0 || n % 4 != 0) return false;
  BlasLt& blas = ctx.blas();
  const size_t half = blas.workspace_bytes() / 2 / 256 * 256;
  if (static_cast<size_t>(splits * m * n) * sizeof(float) > half) return false;
  const int64_t kc = k / splits;
  part = reinterpret_cast<float*>(static_cast<char*>(blas.workspace()) + half);
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
                      blas.workspace(), half, stream_of(ctx), ctx.capturing()});
  note_cublaslt_launch();
  return true;
}

}  // namespace

void set_linear_norm_splits(int splits) {
  splits_flag().store(std::clamp(splits, 0, kLinearNormMaxSplits));
}

int linear_norm_splits() {
  return splits_flag().load();
}

void set_linear_norm_max_rows(int rows) {
  max_rows_flag().store(std::max(rows, 0));
}

int linear_norm_max_rows() {
  return max_rows_flag().load();
}

uint64_t linear_norm_split_launches() {
  return launch_count().load();
}

void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params, const LinearNormExtras& extras) {
  const int splits = splits_for(row_view(x).rows);
  // The opt-in hand-written linears are measurement switches: with one on, its kernel runs.
  const bool other_linear =
      small_m_linear_enabled() || rows_linear_enabled() || streamk_linear_enabled();
  const Tensor& copy = extras.residual_copy;
  float* part = nullptr;
  if (splits >= 2 && !other_linear && add_rms_norm_split_sums_fits(residual, y, splits) &&
      split_k_gemm(ctx, x, w, splits, part)) {
    // The norm kernel writes the copy where it can (a bf16 copy of the f32 residual).
    const bool copy_in_kernel = copy.defined() && add_rms_norm_split_sums_copies(residual, copy);
    add_rms_norm_split_sums(ctx, residual, part, splits, extras.keep_y ? y : Tensor{}, weight, out,
                            params, copy_in_kernel ? copy : Tensor{});
    if (copy.defined() && !copy_in_kernel) cuda::convert(ctx, residual, copy);
    launch_count().fetch_add(1);
    return;
  }
  cuda::linear(ctx, x, w, Tensor{}, y);  // qualified: not the op (argument-dependent lookup)
  cuda::add_rms_norm(ctx, residual, y, weight, out, params);
  if (copy.defined()) cuda::convert(ctx, residual, copy);
}

}  // namespace dspark::cuda
