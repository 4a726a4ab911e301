// Private to small_m_gemm*.cpp: the per-ISA pieces of the small-M product (small_m_gemm.h).
#pragma once

#include <cstdint>

#include "dspark/backend/cpu/kernels/small_m_gemm.h"
#include "dspark/core/dtype.h"

namespace dspark::cpu::small_gemm_detail {

// kSmallGemmBlockCols as an int: the tiles' loop bound.
constexpr int kCols = static_cast<int>(kSmallGemmBlockCols);

// One block of weight rows for every input row:
//   out[r * kSmallGemmBlockCols + j] = sum_k x[r, k] * w[j, k]    r < m, j < ncols
// x: [m, k] f32 with row stride ldx; w: [ncols, k] f32 with row stride ldw, 1 <= ncols <=
// kSmallGemmBlockCols (rows past ncols are never read; their outputs are unspecified).
// prefetch, prefetch_bytes: memory the caller will read next (or null): fetched into L2 while the
// block computes, paced with its FMAs (so memory streams while the FMAs run).
// Summation order: see small_m_gemm.h (identical for every m and every row position).
using BlockFn = void (*)(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                         int64_t ncols, int64_t k, float* out, const void* prefetch,
                         int64_t prefetch_bytes);
// dst[i] = float(src[i]) for i < count; src of dtype f32, bf16 or f16 (exact conversions).
using ConvertFn = void (*)(const void* src, DType dtype, int64_t count, float* dst);

void block_portable(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                    int64_t ncols, int64_t k, float* out, const void* prefetch,
                    int64_t prefetch_bytes);
void convert_portable(const void* src, DType dtype, int64_t count, float* dst);

// Defined only on x86-64 (small_m_gemm_avx2.cpp); callers check small_gemm_has_avx2() first.
void block_avx2(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw, int64_t ncols,
                int64_t k, float* out, const void* prefetch, int64_t prefetch_bytes);
void convert_avx2(const void* src, DType dtype, int64_t count, float* dst);

}  // namespace dspark::cpu::small_gemm_detail
