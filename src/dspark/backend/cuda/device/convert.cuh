// Device-side float conversions: f32 <-> bf16 / f16 (round to nearest even, as the host's
// f32_to_bf16 / f32_to_f16), and loads/stores whose element type is only known at run time
// (FloatKind), used for small secondary operands (norm weights, biases, query rows) so that a
// kernel is not instantiated for every combination of operand dtypes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace dspark::cuda::device {

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// The element type of a float operand chosen at run time.
enum class FloatKind : int { f32 = 0, bf16 = 1, f16 = 2 };

__device__ __forceinline__ float load_float(const void* base, int64_t i, FloatKind kind) {
  switch (kind) {
    case FloatKind::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case FloatKind::f16:
      return __half2float(static_cast<const __half*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// v rounded to `kind` (nearest even) and back to f32: what store_float then load_float give.
__device__ __forceinline__ float round_to(float v, FloatKind kind) {
  switch (kind) {
    case FloatKind::bf16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case FloatKind::f16:
      return __half2float(__float2half_rn(v));
    default:
      return v;
  }
}

__device__ __forceinline__ void store_float(void* base, int64_t i, FloatKind kind, float v) {
  switch (kind) {
    case FloatKind::bf16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      break;
    case FloatKind::f16:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(base)[i] = v;
      break;
  }
}

}  // namespace dspark::cuda::device
