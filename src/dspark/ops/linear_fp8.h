// FP8 (E4M3) weights with one f32 scale per output row, for projections whose exact values do not
// matter to the output of the engine: the drafter's (its proposals are verified by the target, so
// coarser weights can only change acceptance, never the text). Half the bytes of bf16 per step.
//
// Storage: w8 u8 [N, K] holds E4M3 codes (core/fp8.h; the NaN codes are never produced), scale
// f32 [N]; the weight is w[n, k] = e4m3(w8[n, k]) * scale[n].
#pragma once

#include <cstdint>

#include "dspark/backend/context.h"
#include "dspark/core/fp8.h"
#include "dspark/core/tensor.h"

namespace dspark {

// Per-row quantization: scale[n] = max_k |w[n, k]| / 448 (1 for an all-zero row), w8[n, k] =
// f32_to_e4m3(w[n, k] / scale[n]) (a correctly rounded f32 division). w: [N, K] any float dtype,
// contiguous; w8 u8 [N, K]; scale f32 [N]. The CPU and CUDA give the same bytes.
void quantize_rows_fp8(Context& ctx, const Tensor& w, const Tensor& w8, const Tensor& scale);

// y[M, N] = x[M, K] . w^T (+ bias[N]) with w as above, f32 sums of exact products.
//   CUDA: x bf16 (rows contiguous, row stride a multiple of 8 elements, 16-byte aligned), K a
//   multiple of 16, y f32 or bf16; a tensor-core kernel that streams each weight byte once per 64
//   rows of x (its results for a row of x do not depend on M). CPU: any float dtypes, a plain
//   loop (a reference, not a fast path). bias optional ([N], any float dtype).
void linear_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const Tensor& scale,
                const Tensor& bias, const Tensor& y);

// linear (ops/matmul.h), or linear_fp8 when `scale` is defined (w then holds E4M3 codes): the
// projections of weights that may have been quantized (AttentionWeights, MlpWeights).
void project(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& scale,
             const Tensor& bias, const Tensor& y);

}  // namespace dspark
