// Small-M path of linear on CUDA: y[M, N] = x[M, K] . w[N, K]^T (+ bias) for M <= kGemvMaxRows
// with 16-bit weights: a hand-written tensor-core kernel that streams each weight row once with
// 16-byte loads (a decode / verify / draft step is weight-bandwidth bound; cuBLASLt's GEMM kernels
// leave bandwidth unused at these shapes) and whose per-row results do not depend on M (batch
// invariance: verify == decode bitwise). Private to backend/cuda/kernels; the switch is public in
// backend/cuda/kernels.h.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

inline constexpr int kGemvMaxRows = 48;

// Launches the kernel and returns true when the shapes, dtypes and alignments fit (x and w bf16 or
// f16 of the same dtype, K % 8 == 0, 16-byte aligned rows, M <= kGemvMaxRows) and the path is
// enabled (set_small_m_linear; off unless the environment has DSPARK_CUDA_GEMV=1); returns false,
// doing nothing, otherwise.
bool try_gemv(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);

// The widest weight (N) the one-row and few-rows kernels take: an LM head (N = 151,936 for Qwen3)
// stays on cuBLASLt, which streams it at ~100% of the copy bandwidth (the one-row kernel: 5%
// slower, session 7).
inline constexpr int64_t kGemvMaxN = 65536;

// One row of x (gemv_m1.cu, CUDA cores, K split over 16 warps): launches and returns true when x
// and w are bf16 or f16 of the same dtype, y that dtype or f32, M == 1, K % 8 == 0, K <= 16,384,
// N <= 65,536, w contiguous, x and w 16-byte aligned, and the path is enabled (set_m1_linear; on
// unless the environment has DSPARK_CUDA_GEMV_M1=0); returns false, doing nothing, otherwise.
bool try_gemv_m1(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                 const Tensor& y);

inline constexpr int kGemvRowsMaxRows = 32;

// Few rows of x on tensor cores (gemv_rows.cu: a persistent grid, x staged once in shared memory):
// launches and returns true when x and w are bf16 or f16 of the same dtype, y that dtype or f32,
// M <= kGemvRowsMaxRows, K % 8 == 0, K <= 4096, N <= 65,536, w contiguous, x and w 16-byte
// aligned, x fits the shared memory (unless read from global memory), and the path is
// enabled (set_rows_linear; off unless the environment has DSPARK_CUDA_GEMV_ROWS=1); returns false,
// doing nothing, otherwise.
bool try_gemv_rows(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Tensor& y);

inline constexpr int kGemvStreamKMaxRows = 48;

// 1-48 rows of x by the stream-K few-rows kernel (gemv_streamk.cu: warpgroup MMAs, a balanced
// persistent grid over (128-row tile, 64-column block) items, weights and x by TMA): launches and
// returns true when x and w are bf16 or f16 of the same dtype, y that dtype or f32,
// M <= kGemvStreamKMaxRows, N <= 65,536, K % 8 == 0, w contiguous, x and w 16-byte aligned, x's
// rows 8-element aligned, the device has compute capability 9.0 (sm_90a machine code) and the
// driver's tensor-map encoder, and the path is enabled (set_streamk_linear); returns false, doing
// nothing, otherwise.
bool try_gemv_streamk(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& y);

}  // namespace dspark::cuda
