// add_rms_norm of one row held in registers: the arithmetic of norm.cu's one-pass kernel
// (add_rms_norm_regs_kernel), shared with the kernels that run it as their epilogue (the few-row
// quantized product, linear_quant_gemv.cu, whose last CTA normalises the rows the product wrote),
// so that both give the same bits. Private to backend/cuda/kernels.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"

namespace dspark::cuda::row_norm {

struct NormWeight {
  const void* data;  // [cols]
  device::FloatKind kind;
  bool unit_offset;  // scale by (1 + w)
  __device__ __forceinline__ float operator()(int64_t c) const {
    const float w = device::load_float(data, c, kind);
    return unit_offset ? 1.0f + w : w;
  }
};

// copy[0..3] = bf16(v[0..3]) (the rounding of convert) in one 8-byte store.
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* copy, const float (&v)[4]) {
  const __nv_bfloat162 lo(device::from_float<__nv_bfloat16>(v[0]),
                          device::from_float<__nv_bfloat16>(v[1]));
  const __nv_bfloat162 hi(device::from_float<__nv_bfloat16>(v[2]),
                          device::from_float<__nv_bfloat16>(v[3]));
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&lo);
  u.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(copy) = u;
}

// The weights of a thread's vectors c0 + v * step (v < kV), zero from `end` on: a forward never
// writes weights, so callers load them before their programmatic wait.
template <int kV, int kW>
__device__ __forceinline__ void load_weights(const NormWeight& weight, int64_t c0, int64_t step,
                                             int64_t end, float (&w)[kV][kW]) {
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
#pragma unroll
    for (int i = 0; i < kW; ++i) w[v][i] = c < end ? weight(c + i) : 0.0f;
  }
}

// The thread's part of one row of `cols` values: its vectors c0 + v * step (v < kV, those below
// `end`) of res (the residual row, updated in place) and of x (src.load(row, c, d); src.keep(row,
// c, d) after every load). res += x rounded to TR as stored; the sum of squares of the stored
// values over the thread's vectors goes through reduce(ss) to the row's sum; then out[c] =
// res[c] * inv_rms * w[c], written by store(c, value). A non-null `copy` (TR f32 only): the row's
// bf16 copy of the updated residual (convert's rounding). Every thread of the block calls it
// (reduce synchronises them); a thread with no vector adds 0.
template <typename TR, int kV, typename Src, typename Store, typename Reduce>
__device__ __forceinline__ void add_rms_norm_row(TR* res, const Src& src, int64_t row, int64_t c0,
                                                 int64_t step, int64_t end,
                                                 const float (&w)[kV][device::kVecWidth<TR>],
                                                 int64_t cols, float eps, __nv_bfloat16* copy,
                                                 const Store& store, Reduce&& reduce) {
  constexpr int kW = device::kVecWidth<TR>;
  float r[kV][kW], d[kV][kW];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < end) {
      device::load_vec(res + c, r[v]);
      src.load(row, c, d[v]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < end) {
      src.keep(row, c, d[v]);
#pragma unroll
      for (int i = 0; i < kW; ++i) {
        r[v][i] = device::to_float(device::from_float<TR>(r[v][i] + d[v][i]));  // the stored value
        ss += r[v][i] * r[v][i];
      }
      device::store_vec(res + c, r[v]);
      if constexpr (kW == 4) {
        if (copy != nullptr) store_bf16x4(copy + c, r[v]);
      }
    }
  }
  ss = reduce(ss);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < end) {
#pragma unroll
      for (int i = 0; i < kW; ++i) store(c + i, r[v][i] * inv_rms * w[v][i]);
    }
  }
}

}  // namespace dspark::cuda::row_norm
