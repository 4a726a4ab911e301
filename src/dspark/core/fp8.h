// The FP8 E4M3 format (OCP "E4M3FN", as safetensors' F8_E4M3 stores it): sign, 4 exponent bits
// with bias 7, 3 mantissa bits; largest finite 448, no infinities; 0x7F / 0xFF are NaN. Used by
// the drafter's FP8 projections (ops/linear_fp8.h) and by FP8 checkpoints (io/fp8_quant.h).
#pragma once

#include <cstdint>

namespace dspark {

// E4M3 code of v rounded to nearest (ties to even), saturated to +-448; NaN -> 0x7F.
uint8_t f32_to_e4m3(float v);
// The value of an E4M3 code (NaN for 0x7F / 0xFF).
float e4m3_to_f32(uint8_t code);

}  // namespace dspark
