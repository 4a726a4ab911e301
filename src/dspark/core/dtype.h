// Element types, host-side 16-bit float storage types, and type-tag dispatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "dspark/core/error.h"

namespace dspark {

enum class DType : uint8_t { f32, bf16, f16, i32, i64, i8, u8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Accepts dspark names ("f32", "bf16") and safetensors names ("F32", "BF16", "I64" ...).
DType dtype_from_name(std::string_view name);
inline bool dtype_is_float(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

// Host storage for 16-bit floats (device code uses __nv_bfloat16 / __half, same bits).
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline float bf16_to_f32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
float f16_to_f32(f16 v);
f16 f32_to_f16(float f);

inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return bf16_to_f32(v); }
inline float to_f32(f16 v) { return f16_to_f32(v); }
template <typename T>
T from_f32(float v);
template <>
inline float from_f32<float>(float v) { return v; }
template <>
inline bf16 from_f32<bf16>(float v) { return f32_to_bf16(v); }
template <>
inline f16 from_f32<f16>(float v) { return f32_to_f16(v); }

// The DType of a C++ storage type.
template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

// Type tags for dispatch with generic lambdas:
//   dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) { kernel<T>(...); });
template <typename T>
struct TypeTag {
  using type = T;
};

template <typename F>
decltype(auto) dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::bf16: return f(TypeTag<bf16>{});
    case DType::f16: return f(TypeTag<f16>{});
    default: DSPARK_FAIL(unsupported, "expected a float dtype, got {}", dtype_name(dtype));
  }
}

template <typename F>
decltype(auto) dispatch_index(DType dtype, F&& f) {
  switch (dtype) {
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::i64: return f(TypeTag<int64_t>{});
    default: DSPARK_FAIL(unsupported, "expected an integer index dtype, got {}", dtype_name(dtype));
  }
}

}  // namespace dspark
