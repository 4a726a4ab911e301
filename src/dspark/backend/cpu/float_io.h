// Private to the CPU kernels: row access for strided 2-D views, f32 load/store of f32/bf16/f16
// rows, and small f32 vector loops written so the compiler vectorises them without fast-math.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dspark/core/dtype.h"
#include "dspark/core/tensor.h"

namespace dspark::cpu {

// Row r of a 2-D view whose last dim is contiguous.
template <typename T>
T* row_ptr(const Tensor& t, int64_t r) {
  return static_cast<T*>(t.data()) + r * t.stride(0);
}

template <typename T>
inline void load_f32(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (src != dst) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if constexpr (std::is_same_v<T, bf16>) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(src[i].bits) << 16;
      std::memcpy(dst + i, &u, 4);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
  }
}

template <typename T>
inline void store_f32(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (src != dst) std::memmove(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<T>(src[i]);
  }
}

// A float vector tensor of any float dtype (e.g. a norm weight or a bias) as host f32.
inline std::vector<float> vector_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype(), [&]<typename T>(TypeTag<T>) {
    load_f32(static_cast<const T*>(t.data()), out.data(), t.numel());
  });
  return out;
}

// sum_i a[i] * b[i] in f32 with 16 independent partial sums (vectorisable, deterministic).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0] + tail;
}

// y[i] += a * x[i]
inline void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// sum_i x[i]^2 in double (norms)
inline double sum_squares(const float* x, int64_t n) {
  constexpr int kLanes = 8;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(x[i + l]) * x[i + l];
  double s = 0.0;
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  for (double a : acc) s += a;
  return s;
}

// The index of the largest value; ties -> the smallest index; NaN is never chosen unless every
// value is NaN (then 0).
inline int64_t argmax_f32(const float* x, int64_t n) {
  int64_t best = -1;
  float best_value = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v != v) continue;  // NaN
    if (best < 0 || v > best_value) {
      best = i;
      best_value = v;
    }
  }
  return best < 0 ? 0 : best;
}

// A per-thread f32 scratch row of at least n elements (grows, never shrinks).
inline float* thread_scratch(int64_t n, int slot = 0) {
  thread_local std::vector<float> buffers[4];
  auto& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

}  // namespace dspark::cpu
