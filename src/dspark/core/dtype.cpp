#include "dspark/core/dtype.h"

namespace dspark {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::i8: return 1;
    case DType::u8: return 1;
  }
  DSPARK_FAIL(internal, "bad dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  if (name == "f32" || name == "F32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "BF16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "F16" || name == "float16") return DType::f16;
  if (name == "i32" || name == "I32" || name == "int32") return DType::i32;
  if (name == "i64" || name == "I64" || name == "int64") return DType::i64;
  if (name == "i8" || name == "I8" || name == "int8") return DType::i8;
  if (name == "u8" || name == "U8" || name == "uint8" || name == "BOOL") return DType::u8;
  DSPARK_FAIL(unsupported, "unsupported dtype '{}'", name);
}

float f16_to_f32(f16 v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in f16
    if (abs < 0x33000000u) return f16{static_cast<uint16_t>(sign)};
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exp - 150); in units of the f16 subnormal step 2^-24: mant >> (126 - exp).
    const int rshift = static_cast<int>(126 - exp);  // in [14, 24]
    const uint32_t half = mant >> rshift;
    const uint32_t rem = mant & ((1u << rshift) - 1u);
    const uint32_t midpoint = 1u << (rshift - 1);
    uint32_t res = half;
    if (rem > midpoint || (rem == midpoint && (half & 1u))) ++res;
    return f16{static_cast<uint16_t>(sign | res)};
  }
  // normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even
  uint32_t res = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) ++res;
  return f16{static_cast<uint16_t>(sign | res)};
}

}  // namespace dspark
