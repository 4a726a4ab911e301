#include "dspark/core/fp8.h"

#include <cmath>

namespace dspark {

uint8_t f32_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const float a = std::fabs(v);
  if (a >= 448.0f) return sign | 0x7E;
  if (a < 0x1p-6f) {  // subnormal codes count units of 2^-9 (8 units is the smallest normal)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exponent = e + 6;               // biased: a = (2m) * 2^(exponent - 7)
  int mantissa = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  if (exponent > 15 || (exponent == 15 && mantissa == 7)) return sign | 0x7E;
  return sign | static_cast<uint8_t>((exponent << 3) | mantissa);
}

float e4m3_to_f32(uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  if (exponent == 15 && mantissa == 7) return NAN;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

}  // namespace dspark
