// The CPU's interleaved layout of block-quantized weights (WeightFormat::blocks_x8), every block
// format: rows in groups of 8, so that one 32-byte integer dot (AVX-512 VNNI
// vpdpbusd, or AVX2's vpmaddubsw / vpmaddwd) multiplies 4 values of 8 weight rows at once and a
// block's 8 integer sums are converted and scaled together (quant_gemm_x8.cpp). Same bytes as the
// plain layout.
//
// Rows 8g .. 8g+7 (g < n / 8) take the 8 * row_bytes bytes where the plain layout has them; the
// last n % 8 rows stay plain after the groups. Within a group, block b of the 8 rows takes
// 8 * block bytes at offset b * 8 * block bytes:
//   Q4_0: f16 d[8] | 128 bytes of nibbles;  Q4_1: f16 d[8] | f16 m[8] | 128 bytes of nibbles;
//   Q5_0: f16 d[8] | 32 bytes of fifth bits | 128 bytes of nibbles;
//   Q5_1: f16 d[8] | f16 m[8] | 32 bytes of fifth bits | 128 bytes of nibbles;
//   Q8_0: f16 d[8] | 256 bytes of values, each stored as value + 128 (unsigned);
//   Q8_A: f16 d[8] | f16 m[8] | 256 bytes of values (unsigned, as stored);
//   Q4_A64 / Q4_A128 (Q8_A64 / Q8_A128): f16 d[8] | f16 m[8] | per unit u of 32 values the 128
//   (256) bytes Q4_1 (Q8_A) has for a block, at 32 + 128u (32 + 256u): one d and m per group.
// The values (nibbles: the block's own bytes, low nibble value j, high nibble value j + 16) as
// chunks of 4 bytes, chunk t of the 8 rows in row order: byte 32t + 4r + i = byte 4t + i of row
// r's quants. Q5's fifth bits (the row's u32 qh, bit j for value j): byte 4r + i, bit s = bit
// 4s + i of row r's qh, so that one shift and mask of the 32 bytes gives the fifth bits of values
// 4s .. 4s+3 of the 8 rows in the order of their nibbles.
//
// Q4_K: super-block b of the 8 rows (8 * 144 = 1,152 bytes) at offset b * 1,152, with the 6-bit
// scales sc[u] and mins m[u] of its 8 units of 32 values regrouped by unit, so that one load
// gives a unit's 8 rows (byte 8u' + r, u' = 0..3, for row r):
//   0: f16 d[8] | 16: f16 dmin[8] | 32: sc[u'] & 15 | (sc[u'+4] & 15) << 4  (32 bytes)
//   64: the same of the mins (32 bytes)
//   96: sc[u'] >> 4 | (sc[u'+4] >> 4) << 2 | (m[u'] >> 4) << 4 | (m[u'+4] >> 4) << 6  (32 bytes)
//   128: the nibbles, 256 bytes per pair of units p = 0..3 (unit 2p the low nibbles of the row's
//        qs[32p .. 32p+31], unit 2p+1 the high ones): byte 32t + 4r + i = qs[32p + 4t + i].
// Q5_K: the same (8 * 176 = 1,408 bytes per super-block of the 8 rows), then at 1,152 the fifth
//   bits: byte 32c + 4r + i = qh[4c + i] of row r (c = 0..7; bit u is value 4c + i of unit u).
// Q6_K: super-block b of the 8 rows (8 * 210 = 1,680 bytes) at offset b * 1,680:
//   0: f16 d[8] | 16: the int8 scales, byte 8i + r = scale i (values 16i .. 16i+15) of row r
//   144: ql then qh as chunks of 4 bytes of the 8 rows: chunk c (0..47) of the row's 192 bytes
//        ql[128] | qh[64] at 144 + 32c, byte 4r + i = byte 4c + i of row r.
#pragma once

#include <cstdint>

#include "dspark/core/quant.h"

namespace dspark::cpu {

// n rows of k values from the plain layout at src to the interleaved layout at dst
// (n * quant_row_bytes(t, k) bytes each; they must not overlap).
void pack_rows_x8(QuantType t, const uint8_t* src, int64_t n, int64_t k, uint8_t* dst);

// Row `row` of an interleaved matrix of n rows, in the plain layout (quant_row_bytes(t, k) bytes).
void unpack_row_x8(QuantType t, const uint8_t* packed, int64_t n, int64_t k, int64_t row,
                   uint8_t* dst);

// One group of 8 rows (rows[r] in the plain layout, null for a missing row: zeros) into the group
// layout at dst (8 * quant_row_bytes(t, k) bytes).
void pack_group_x8(QuantType t, const uint8_t* const rows[8], int64_t k, uint8_t* dst);

}  // namespace dspark::cpu
