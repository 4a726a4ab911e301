// Pieces shared by the small-M tensor-core linear kernels (gemv.cu: 16-bit weights; gemv_fp8.cu:
// E4M3 weights). Both give a CTA 16 weight rows (the MMA's M) and split K over its 8 warps in
// chunks, by K only, so that a row's result does not depend on M. Also the chunk MMA the few-rows
// kernel (gemv_rows.cu) uses, and the host-side input checks, dtype dispatch and bias argument of
// the 16-bit entry points (gemv.cu, gemv_m1.cu, gemv_rows.cu). Private to backend/cuda/kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda::gemv_tile {

constexpr int kWarps = 8;       // split-K ways per CTA
constexpr int kRows = 16;       // weight rows per CTA
constexpr int kSplitAlign = 4;  // chunks per warp are a multiple of this
constexpr int kPrefetch = 4;    // chunks per warp and row prefetched into L2 before pdl_wait()

// Weights are read exactly once: stream them past L1 (ld.global.nc with no L1 allocation) and let
// L2 fetch 256 bytes at a time.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The chunks [begin, end) of K that warp `warp` takes (a multiple of kSplitAlign per warp, from K
// alone: never from M or the unroll); chunks before end_full are whole.
struct ChunkRange {
  int64_t begin, end, end_full;
};
__device__ __forceinline__ ChunkRange warp_chunks(int64_t k, int64_t chunk, int warp) {
  const int64_t chunks = (k + chunk - 1) / chunk, full = k / chunk;
  const int64_t per_warp =
      ((chunks + kWarps - 1) / kWarps + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  const int64_t begin = warp * per_warp;
  const int64_t end = min(begin + per_warp, chunks);
  return ChunkRange{begin, end, min(end, full)};
}

// The first chunks of weight rows a and b into L2 (one lane per 128-byte line), while the kernel
// before still runs: weights were written before the forward.
__device__ __forceinline__ void prefetch_rows(const void* a, const void* b, const ChunkRange& r,
                                              int64_t chunk_bytes) {
  const int64_t step = 128 / chunk_bytes > 0 ? 128 / chunk_bytes : 1;
  for (int64_t q = r.begin; q < min(r.begin + kPrefetch, r.end_full); q += step) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(a) + q * chunk_bytes));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(b) + q * chunk_bytes));
  }
}

// acc[t] (lane g = lane / 4, c = lane % 4): (row g, tokens 8t + 2c, 8t + 2c + 1), (row g + 8, same
// tokens). Stores every warp's acc, then each (row, token) of the CTA sums the warps in warp order
// and calls out(row, token, sum) for rows < n and tokens < m. W: the CTA's warps.
template <int NT, int W = kWarps, typename Out>
__device__ __forceinline__ void reduce_warps(float (&partial)[W][kRows][8 * NT],
                                             const float (&acc)[NT][4], int64_t row0, int64_t n,
                                             int64_t m, Out out) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    partial[warp][g][8 * t + 2 * c] = acc[t][0];
    partial[warp][g][8 * t + 2 * c + 1] = acc[t][1];
    partial[warp][g + 8][8 * t + 2 * c] = acc[t][2];
    partial[warp][g + 8][8 * t + 2 * c + 1] = acc[t][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * m; i += W * 32) {
    const int r = i % kRows, token = i / kRows;
    const int64_t row = row0 + r;
    if (row >= n) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) sum += partial[w][r][token];
    out(row, token, sum);
  }
}

// The two MMA steps of one 32-element chunk: a / b hold weight rows g and g + 8, x[t] token rows
// g + 8t (see gemv.cu's header comment for the k permutation: the same one for A and B).
template <typename TW, int NT>
__device__ __forceinline__ void mma_chunk(float (&acc)[NT][4], const uint4& a, const uint4& b,
                                          const uint4 (&x)[NT]) {
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const uint32_t a0 = word(a, 2 * s), a1 = word(b, 2 * s);
    const uint32_t a2 = word(a, 2 * s + 1), a3 = word(b, 2 * s + 1);
#pragma unroll
    for (int t = 0; t < NT; ++t)
      device::mma<TW>(acc[t], a0, a1, a2, a3, word(x[t], 2 * s), word(x[t], 2 * s + 1));
  }
}

// Host side of the 16-bit entry points (gemv.cu, gemv_m1.cu, gemv_rows.cu): whether x, w and y fit
// their kernels at all (x and w bf16 or f16 of one dtype, y that dtype or f32, K % 8 == 0, w
// contiguous, x and w 16-byte aligned, x's rows 8-element aligned when there are several); each
// adds its own limits on M, N and K.
inline bool fits_16bit(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (x.dtype() != w.dtype() || (x.dtype() != DType::bf16 && x.dtype() != DType::f16)) return false;
  if (y.dtype() != DType::f32 && y.dtype() != x.dtype()) return false;
  const RowView xv = row_view(x);
  if (xv.cols % 8 != 0 || w.size(0) < 1) return false;
  if (!w.is_contiguous() || !device::is_aligned16(w.data()) || !device::is_aligned16(x.data()))
    return false;
  return xv.rows <= 1 || xv.stride % 8 == 0;
}

// Calls f(TypeTag<TW>{}, TypeTag<TY>{}) for the dtype pair of a call that fits_16bit: TW the 16-bit
// type of x and w, TY the output type (f32 or TW). Other pairs call nothing.
template <typename F>
void dispatch_16bit(DType x, DType y, F&& f) {
  dispatch_float(x, [&]<typename TW>(TypeTag<TW>) {
    if constexpr (!std::is_same_v<TW, float>) {
      dispatch_float(y, [&]<typename TY>(TypeTag<TY>) {
        if constexpr (std::is_same_v<TY, float> || std::is_same_v<TY, TW>)
          f(TypeTag<TW>{}, TypeTag<TY>{});
      });
    }
  });
}

// A 16-bit linear call's sizes and row strides as the kernels' params take them (after
// fits_16bit): a single row's stride is irrelevant, so it is given as K (x) and N (y).
struct LinearDims {
  int64_t m, n, k, ldx, ldy;
};
inline LinearDims linear_dims(const Tensor& x, const Tensor& w, const Tensor& y) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, k = xv.cols, n = w.size(0);
  return {m, n, k, m == 1 ? k : xv.stride, m == 1 ? n : yv.stride};
}

// A linear's optional bias as the kernels' params take it: null and f32 when there is none.
struct BiasArg {
  const void* data;
  device::FloatKind kind;
};
inline BiasArg bias_arg(const Tensor& bias) {
  if (!bias.defined() || bias.numel() == 0) return {nullptr, device::FloatKind::f32};
  return {bias.data(), float_kind(bias.dtype())};
}

}  // namespace dspark::cuda::gemv_tile
