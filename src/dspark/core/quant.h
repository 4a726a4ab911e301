// Block-quantized weight formats: GGUF's legacy quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and k-quants
// (Q4_K, Q5_K, Q6_K), the types of the Q4_K_M, Q5_K_M, Q6_K and Q8_0 files, plus Q8_A, dspark's
// own block for MLX affine 8-bit weights (no GGUF type: it is never written to a file). A weight
// row of K values is K / elements consecutive blocks; a matrix [N, K] is N rows of
// quant_row_bytes(K) bytes. quant.cpp holds the reference dequantization: the definition every
// kernel and test follows, bit for bit that of the `gguf` Python package
// (gguf.quants.dequantize) for the GGUF types, and of MLX's w = scale * q + bias for Q8_A.
//
// Blocks (little-endian; d, dmin, m are f16):
//   Q4_0  32 values, 18 B   d, u8 qs[16]                  x = d * (q - 8)
//   Q4_1  32 values, 20 B   d, m, u8 qs[16]               x = d * q + m
//   Q5_0  32 values, 22 B   d, u8 qh[4], u8 qs[16]        x = d * (q - 16)
//   Q5_1  32 values, 24 B   d, m, u8 qh[4], u8 qs[16]     x = d * q + m
//   Q8_0  32 values, 34 B   d, i8 qs[32]                  x = d * q
//   Q8_A  32 values, 36 B   d, m, u8 qs[32]               x = d * q + m  (q unsigned, 0..255)
//     (4-bit values: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble;
//      Q5's fifth bit of element j is bit j of the u32 qh)
//   Q4_K  256 values, 144 B   d, dmin, u8 scales[12], u8 qs[128]
//   Q5_K  256 values, 176 B   d, dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//     (8 sub-blocks of 32 with 6-bit scale sc and min m: x = d * sc * q - dmin * m)
//   Q6_K  256 values, 210 B   u8 ql[128], u8 qh[64], i8 scales[16], d
//     (16 sub-blocks of 16: x = d * scales[sub] * (q - 32), q of 6 bits)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dspark {

enum class QuantType : uint8_t { q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, q8_a };

// Every block type the kernels run.
inline constexpr std::array<QuantType, 9> kQuantTypes = {
    QuantType::q4_0, QuantType::q4_1, QuantType::q5_0, QuantType::q5_1, QuantType::q8_0,
    QuantType::q4_k, QuantType::q5_k, QuantType::q6_k, QuantType::q8_a};
// Those that GGUF files hold (all but Q8_A).
inline constexpr std::array<QuantType, 8> kGgufQuantTypes = {
    QuantType::q4_0, QuantType::q4_1, QuantType::q5_0, QuantType::q5_1,
    QuantType::q8_0, QuantType::q4_k, QuantType::q5_k, QuantType::q6_k};

struct QuantBlock {
  int64_t elements;  // values per block
  int64_t bytes;     // bytes per block
};

QuantBlock quant_block(QuantType type);
// "Q4_0", "Q4_K", ... (the GGUF spelling; "Q8_A").
std::string_view quant_type_name(QuantType type);
// The type spelled `name` (case-insensitive), or nullopt.
std::optional<QuantType> quant_type_from_name(std::string_view name);
// Bytes of a row of k values (k a multiple of the block's elements; checked).
int64_t quant_row_bytes(QuantType type, int64_t k);

// The reference dequantization of `n_blocks` consecutive blocks at `src` into `dst`
// (n_blocks * elements floats), in the order of operations of the gguf package.
void dequantize_blocks(QuantType type, const uint8_t* src, int64_t n_blocks, float* dst);

}  // namespace dspark
