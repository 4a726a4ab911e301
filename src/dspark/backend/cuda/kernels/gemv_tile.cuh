// Pieces shared by the hand-written linear kernels (gemv_fp8.cu: E4M3 weights on tensor cores, a
// CTA per 16 weight rows with K split over its warps by K only, so that a row's result does not
// depend on M; gemv_m1.cu: one row of 16-bit weights on CUDA cores): streaming weight loads, the
// warps' chunks of K and their reduction, and the host side of the 16-bit kernel (dtype dispatch,
// bias argument). Private to backend/cuda/kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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

// Calls f(TypeTag<TW>{}, TypeTag<TY>{}) for the dtype pair of a 16-bit call: TW the 16-bit
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
