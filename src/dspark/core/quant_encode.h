// Block quantization of f32 values into GGUF's formats (core/quant.h), for `dspark quantize
// --format q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k` (and the mixes q4_k_m, q5_k_m). The legacy
// blocks of 32 values follow the rules of GGUF's reference quantizers, bit for bit those of the
// `gguf` Python package's gguf.quants.quantize (d and m stored f16, the codes computed from the
// unrounded f32 d):
//   Q8_0  d = max|x| / 127; q = round(x / d) (halves away from zero)
//   Q4_0  d = -v / 8 where v is the value of largest magnitude (the first one on a tie);
//         q = min(15, trunc(x / d + 8.5))
//   Q5_0  the same with 16 and 31: d = -v / 16; q = min(31, trunc(x / d + 16.5))
//   Q4_1  d = (max - min) / 15, m = min; q = min(15, trunc((x - m) / d + 0.5))
//   Q5_1  the same with 31
// (x / d is x times the f32 reciprocal of d, and 0 when d is 0.) The k-quants (blocks of 256; the
// gguf package has no k-quant quantizer to match) search each sub-block's scale (and offset) for
// the least squared error, then round the sub-block scales onto the block's grid: see
// search_affine and encode_k_with_min (Q4_K, Q5_K), search_symmetric and encode_q6_k in
// quant_encode.cpp. The blocks are encoded on ThreadPool::global()'s threads.
#pragma once

#include <cstdint>

#include "dspark/core/quant.h"

namespace dspark {

// True for the types quantize_blocks writes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool quant_type_encodable(QuantType type);

// Quantizes n_blocks blocks of values at `x` (quant_block(type).elements each) into n_blocks
// consecutive blocks of `type` at `dst`.
// Throws ErrorKind::unsupported for a type quant_type_encodable refuses.
void quantize_blocks(QuantType type, const float* x, int64_t n_blocks, uint8_t* dst);

}  // namespace dspark
