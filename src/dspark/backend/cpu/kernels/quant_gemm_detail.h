// Private to quant_gemm*.cpp: the x blocks and the per-ISA pieces of the product with
// block-quantized weights (quant_gemm.h documents the arithmetic both ISAs follow).
#pragma once

#include <cstdint>
#include <cstring>

#include "dspark/core/quant.h"

namespace dspark::cpu::quant_gemm_detail {

// Weight rows per block (the unit of the thread split; a multiple of every tile width).
constexpr int64_t kBlockCols = 16;

// The rows of x rounded to 8 bits (quant_gemm.h), row r at base + r * row_bytes:
//   int8 q[k]  |  f32 d[k / 32]  |  f32 s[k / 32]  |  i32 sum[k / 32]  |  i32 sum16[k / 32]
// q: block b = values 32b .. 32b+31 in order; sum: each block's sum of q (the packed kernels'
// correction of an offset weight; quant_pack.h); sum16: the sum of its first 16 values (Q6_K's
// scales cover 16 values). row_bytes a multiple of 64, so q and the floats are 32-byte aligned
// when base is.
struct XBlocks {
  const uint8_t* base = nullptr;
  int64_t row_bytes = 0;
  int64_t blocks = 0;  // k / 32

  const int8_t* q(int64_t r) const { return reinterpret_cast<const int8_t*>(base + r * row_bytes); }
  const float* d(int64_t r) const {
    return reinterpret_cast<const float*>(base + r * row_bytes + blocks * 32);
  }
  const float* s(int64_t r) const { return d(r) + blocks; }
  const int32_t* sum(int64_t r) const {
    return reinterpret_cast<const int32_t*>(d(r) + 2 * blocks);
  }
  const int32_t* sum16(int64_t r) const { return sum(r) + blocks; }
};

inline int64_t x_row_bytes(int64_t k) {
  return (k + 16 * (k / 32) + 63) / 64 * 64;
}

// A block of x whose largest magnitude is below this rounds to zeros (127 / amax would overflow).
constexpr float kTinyXBlock = 1e-30f;

// One row of k f32 values (k a multiple of 32) into its x blocks at dst (x_row_bytes(k) bytes).
void quantize_x_row(const float* v, int64_t k, uint8_t* dst);
// The same values (quant_x_rows_avx2.cpp; AVX2 CPUs only).
void quantize_x_row_avx2(const float* v, int64_t k, uint8_t* dst);

// One block of weight rows for every x row, portable C++ (any block format):
//   out[r * kBlockCols + j] = dot(x row r, weight row j)   r < m, j < ncols (1 <= ncols <=
//   kBlockCols), without the bias; w: ncols rows of w_row_bytes bytes in the plain layout.
void block_portable(QuantType type, const XBlocks& x, int64_t m, const uint8_t* w,
                    int64_t w_row_bytes, int64_t ncols, float* out);

// The same on x86-64 (quant_gemm_x8.cpp): `groups` (1 or 2) groups of 8 weight rows in the
// interleaved layout (quant_pack.h) at g[0], g[1]: out[r * kBlockCols + 8 * j + c] = output c of
// group j for x row r. avx512: AVX-512 VNNI + VL (quant_gemm_has_avx512()); else AVX2.
void block_x8(QuantType type, bool avx512, const XBlocks& x, int64_t m, const uint8_t* const* g,
              int64_t groups, float* out);

// The 6-bit scales sc[0..7] and mins m[0..7] of a Q4_K / Q5_K super-block from its 12 packed
// bytes (core/quant.h): bytes 0-7 of `out` are the scales, 8-15 the mins.
inline void k_scales_mins(const uint8_t* packed, uint8_t out[16]) {
  constexpr uint32_t kMask1 = 0x3f3f3f3f, kMask2 = 0x0f0f0f0f, kMask3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kMask2) | (((u[1] >> 6) & kMask3) << 4);
  const uint32_t mins_lo = u[1] & kMask1;
  u[1] = (u[2] & kMask2) | (((u[0] >> 6) & kMask3) << 4);
  u[2] = mins_lo;
  u[0] &= kMask1;
  std::memcpy(out, u, 16);
}

}  // namespace dspark::cpu::quant_gemm_detail
