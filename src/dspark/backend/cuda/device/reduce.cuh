// Warp and block reductions. Block reductions need blockDim.x to be a multiple of 32 (at most
// 1024), are called by every thread of the block, and return the result to every thread. Their
// order of operations is fixed by the thread layout, so results are deterministic run to run.
// `smem` is a __shared__ scratch array the caller owns ([32] or [32 * N] elements); calls may
// reuse the same array back to back (each call starts with a barrier).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace dspark::cuda::device {

inline constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  T r = lane < n_warps ? smem[lane] : T(0);
  return warp_sum(r);  // every warp reduces the same values in the same order
}

// Element-wise block sum of N values per thread; smem holds 32 * N elements.
template <typename T, int N>
__device__ __forceinline__ void block_sum_n(T (&v)[N], T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(v[k]);
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) smem[k * 32 + warp] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = warp_sum(lane < n_warps ? smem[k * 32 + lane] : T(0));
}

__device__ __forceinline__ float block_max(float v, float* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_max(lane < n_warps ? smem[lane] : -INFINITY);
}

// Argmax order: a larger value wins, equal values go to the smaller index, NaN loses to any
// number (so NaN is chosen only when every candidate is NaN, and then the smallest index).
// Empty slots carry index INT32_MAX and value NaN.
__device__ __forceinline__ bool argmax_better(float va, int ia, float vb, int ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, offset);
    const int oi = __shfl_xor_sync(kFullMask, i, offset);
    if (argmax_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// smem_v, smem_i: [32] each. Every thread gets the winning (value, index).
__device__ __forceinline__ void block_argmax(float& v, int& i, float* smem_v, int* smem_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  warp_argmax(v, i);
  __syncthreads();
  if (lane == 0) {
    smem_v[warp] = v;
    smem_i[warp] = i;
  }
  __syncthreads();
  v = lane < n_warps ? smem_v[lane] : NAN;
  i = lane < n_warps ? smem_i[lane] : INT32_MAX;
  warp_argmax(v, i);
}

}  // namespace dspark::cuda::device
