// MLX affine quantization of float rows (the inverse of io/mlx_quant.h's unpacking): what
// `mx.quantize(w, group_size, bits)` computes, written for `dspark quantize`.
//
// Per group of G values (f32 arithmetic throughout), as MLX's CPU kernel derives them:
//   lo, hi = the group's min and max; step = max((hi - lo) / (2^bits - 1), 1e-7)
//   edge = lo when |lo| > |hi|, else hi (the end farther from zero); scale = step with the sign
//   that points from the edge into the group (+ for lo, - for hi)
//   z = rint(edge / scale); when z != 0: scale = edge / z, bias = edge (0 is then exactly
//   representable, as code -z); when z == 0: bias = 0
//   q = clamp(rint((w - bias) / scale), 0, 2^bits - 1)
// rint rounds halves to even (MLX's CPU kernel; its CUDA kernel rounds halves away from zero and
// starts the max at 0, see docs/quantization.md). The codes are computed with the f32
// scale and bias; the file stores them rounded to its scale dtype, as MLX does.
#pragma once

#include <cstdint>

#include "dspark/io/mlx_quant.h"

namespace dspark {

// Quantizes `rows` rows of `cols` f32 values (row-major; cols a multiple of spec.group_size,
// spec checked by check_mlx_quant_spec) into `words` (rows * cols * bits / 32 U32 words, value j
// of a word in bits [bits * j, bits * j + bits)), `scales` and `biases` (rows * cols / G each).
void mlx_quantize_rows(const float* w, int64_t rows, int64_t cols, MlxQuantSpec spec,
                       uint32_t* words, float* scales, float* biases);

}  // namespace dspark
