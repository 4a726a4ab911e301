// Block-quantized weight formats: GGUF's legacy quants (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and k-quants
// (Q4_K, Q5_K, Q6_K), the types of the Q4_K_M, Q5_K_M, Q6_K and Q8_0 files, plus dspark's own
// blocks for MLX affine weights (no GGUF type: they are never written to a file): Q8_A (8 bits,
// groups of 32) and Q4_A64 / Q4_A128 / Q8_A64 / Q8_A128 (4 or 8 bits, groups of 64 or 128). A
// weight row of K values is K / elements consecutive blocks; a matrix [N, K] is N rows of
// quant_row_bytes(K) bytes. quant.cpp holds the reference dequantization: the definition every
// kernel and test follows, bit for bit that of the `gguf` Python package
// (gguf.quants.dequantize) for the GGUF types, and of MLX's w = scale * q + bias for Q8_A and the
// group types.
//
// Blocks (little-endian; d, dmin, m are f16):
//   Q4_0  32 values, 18 B   d, u8 qs[16]                  x = d * (q - 8)
//   Q4_1  32 values, 20 B   d, m, u8 qs[16]               x = d * q + m
//   Q5_0  32 values, 22 B   d, u8 qh[4], u8 qs[16]        x = d * (q - 16)
//   Q5_1  32 values, 24 B   d, m, u8 qh[4], u8 qs[16]     x = d * q + m
//   Q8_0  32 values, 34 B   d, i8 qs[32]                  x = d * q
//   Q8_A  32 values, 36 B   d, m, u8 qs[32]               x = d * q + m  (q unsigned, 0..255)
//   Q4_A64   64 values,  36 B   d, m, u8 qs[32]           x = d * q + m  (4.5 bits per value)
//   Q4_A128 128 values,  68 B   d, m, u8 qs[64]           (4.25)
//   Q8_A64   64 values,  68 B   d, m, u8 qs[64]           (8.5)
//   Q8_A128 128 values, 132 B   d, m, u8 qs[128]          (8.25)
//     (MLX's groups of 64 / 128: one d and m per group; unit u of 32 values is qs[16u .. 16u+15]
//      in Q4_1's nibble order, or qs[32u .. 32u+31] as Q8_A's bytes. Expanded to one Q4_1 / Q8_A
//      block per unit with the group's d and m, they dequantize and multiply the same.)
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

enum class QuantType : uint8_t {
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q8_0,
  q4_k,
  q5_k,
  q6_k,
  q8_a,
  q4_a64,
  q4_a128,
  q8_a64,
  q8_a128
};

// Every block type the kernels of both devices run.
inline constexpr std::array<QuantType, 9> kQuantTypes = {
    QuantType::q4_0, QuantType::q4_1, QuantType::q5_0, QuantType::q5_1, QuantType::q8_0,
    QuantType::q4_k, QuantType::q5_k, QuantType::q6_k, QuantType::q8_a};
// MLX's groups of 64 and 128 values: the CPU's kernels run them; CUDA's take them expanded to
// their 32-value blocks (expand_quant_groups).
inline constexpr std::array<QuantType, 4> kGroupQuantTypes = {
    QuantType::q4_a64, QuantType::q4_a128, QuantType::q8_a64, QuantType::q8_a128};
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

// The 32-value type whose blocks a group type is made of (Q4_A64 / Q4_A128: Q4_1; Q8_A64 /
// Q8_A128: Q8_A); every other type is its own.
QuantType quant_unit_type(QuantType type);

// `n_blocks` consecutive blocks of `type` at `src` as blocks of quant_unit_type(type) at `dst`
// (n_blocks * elements / 32 of them): each unit of 32 values becomes one block carrying its group's
// d and m, so the values are the same bit for bit. A type that is its own unit type is copied.
void expand_quant_groups(QuantType type, const uint8_t* src, int64_t n_blocks, uint8_t* dst);

// The reference dequantization of `n_blocks` consecutive blocks at `src` into `dst`
// (n_blocks * elements floats), in the order of operations of the gguf package.
void dequantize_blocks(QuantType type, const uint8_t* src, int64_t n_blocks, float* dst);

}  // namespace dspark
