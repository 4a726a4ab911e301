// 16-byte vector loads and stores of f32 / bf16 / f16 elements, converted to and from f32.
// A vector of T holds kVecWidth<T> elements (4 f32 or 8 bf16/f16). Callers check alignment
// (is_aligned16) and fall back to scalar code otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dspark/backend/cuda/device/convert.cuh"

namespace dspark::cuda::device {

template <typename T>
inline constexpr int kVecWidth = 16 / static_cast<int>(sizeof(T));

__host__ __device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// out[i] = float(p[i]) for i < kVecWidth<T>; p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[kVecWidth<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVecWidth<T>; ++i) out[i] = to_float(e[i]);
}

// p[i] = T(in[i]) for i < kVecWidth<T>; p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[kVecWidth<T>]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVecWidth<T>; ++i) e[i] = from_float<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

}  // namespace dspark::cuda::device
