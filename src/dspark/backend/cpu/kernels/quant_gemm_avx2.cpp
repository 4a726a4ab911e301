// AVX2 + FMA + F16C kernels of the product with block-quantized weights (quant_gemm.h gives the
// arithmetic, which the portable kernels in quant_gemm.cpp follow too, bit for bit). The library
// is built for baseline x86-64, so every function here carries __attribute__((target(...))) and
// is only called after quant_gemm_has_avx2() said yes. Q4_0, Q4_1, Q8_0 and the k-quants run
// elsewhere (block sums on interleaved rows, quant_gemm_x8.cpp); these kernels serve Q5_0 and
// Q5_1, and hold the x rows' rounding of every format.
//
// Per unit of 32 weights and x row, as llama.cpp's ggml_vec_dot_*_q8_* do it: the weight's
// integer values unpacked into the bytes of a register (nibbles: one load, a shift and masks;
// Q5's fifth bits: a byte shuffle of the 32-bit mask; signed values through _mm256_sign_epi8 on
// both operands), _mm256_maddubs_epi16 + _mm256_madd_epi16 for the 8 int32 lanes, converted once
// and scaled into the f32 accumulator with one FMA. Q5_0 / Q5_1 go two blocks per register pair
// (the low halves of both blocks, then the high halves, against x stored in that order), so one
// madd / convert / FMA serves two blocks. The f16 scales of 8 blocks are converted at once and
// multiplied by x's 8 scales in one multiply.
//
// A tile is MR x rows by NR weight rows: each weight unit is unpacked once and used for all MR
// rows while in registers. Decode: MR = 1, NR = 4. More rows go in blocks of 8 (verify widths):
// 3-8 rows against one weight row at a time (legacy_tile), 2 rows against two, a last single row
// as decode. The min terms are folded into the MR = 1 tile and done in a short separate pass for
// the wider ones (the same operations either way). The weight stream is prefetched into L2 a few
// KiB ahead.
#include "dspark/backend/cpu/kernels/quant_gemm_detail.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#define DSPARK_AVX2 __attribute__((target("avx2,fma,f16c")))
// For the lambdas of the tiles: GCC may otherwise call them out of line, the accumulators then
// going through memory (measured 1.4-1.5x slower tiles).
#define DSPARK_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline))

namespace dspark::cpu::quant_gemm_detail {
namespace {

constexpr int kCols = static_cast<int>(kBlockCols);

DSPARK_AVX2 inline float half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

// ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7))
DSPARK_AVX2 inline float reduce8(__m256 a) {
  const __m256 h = _mm256_hadd_ps(a, a);  // [a0+a1, a2+a3, ., . | a4+a5, a6+a7, ., .]
  const __m256 q = _mm256_hadd_ps(h, h);  // [(a0+a1)+(a2+a3), . | (a4+a5)+(a6+a7), .]
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}

// reduce8 of 8 vectors at once: lane i = reduce8(v[i]), the same additions in the same order.
DSPARK_AVX2 inline __m256 reduce8x8(const __m256* v) {
  const __m256 q0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 q1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(q0, q1, 0x20), _mm256_permute2f128_ps(q0, q1, 0x31));
}

// The outputs of a tile of MR x rows by NR weight rows: reduce8(acc) plus (kMinSign 1) or minus
// (-1) reduce8(mn), or alone (0). One weight row: the MR reductions at once (reduce8x8).
template <int kMinSign, int MR, int NR>
DSPARK_AVX2 inline void store_tile(const __m256 (&acc)[MR][NR], const __m256 (&mn)[MR][NR],
                                   float* out) {
  if constexpr (NR == 1 && MR > 1) {
    __m256 a[8], b[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      a[r] = r < MR ? acc[r][0] : _mm256_setzero_ps();
      b[r] = r < MR ? mn[r][0] : _mm256_setzero_ps();
    }
    __m256 y = reduce8x8(a);
    if constexpr (kMinSign > 0) y = _mm256_add_ps(y, reduce8x8(b));
    if constexpr (kMinSign < 0) y = _mm256_sub_ps(y, reduce8x8(b));
    alignas(32) float t[8];
    _mm256_store_ps(t, y);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) out[r * kCols] = t[r];
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const float y = reduce8(acc[r][j]);
        out[r * kCols + j] = kMinSign > 0   ? y + reduce8(mn[r][j])
                             : kMinSign < 0 ? y - reduce8(mn[r][j])
                                            : y;
      }
  }
}

// The 32 nibbles of 16 bytes: element j < 16 the low nibble of byte j, j + 16 its high nibble.
DSPARK_AVX2 inline __m256i nibbles32(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of the little-endian u32 at p is set, else 0.
DSPARK_AVX2 inline __m256i bits32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0101010101010101, 0x0000000000000000);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(v), shuffle);
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);  // every bit but bit j % 8
  return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi64x(-1));
}

DSPARK_AVX2 inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Software prefetch of the weight stream into L2, paced with the work: the `bytes` bytes
// kPrefetchAhead past those being read (the rows of a block are contiguous, so this runs into the
// next rows and the next block). On the 2-core EPYC (Zen 3) VM, the SmolLM2 forward on one thread
// went from 12.3 to 9.2 ms with it; 4-16 KiB ahead measured alike, 1 KiB and 32 KiB worse, T0 and
// T1 alike (bench: a forward of distinct weights, thread CPU time).
constexpr int64_t kPrefetchAhead = 8192;
DSPARK_AVX2 inline void prefetch_ahead(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + o), _MM_HINT_T1);
}

// ---- Legacy formats -------------------------------------------------------------------------
//
// Q5_0 / Q5_1 go two blocks at a time (quant_gemm.h's paired lanes): one register
// holds the 16 low values of blocks b and b+1, another their 16 high values, which is what one
// 16-byte load per block, a shift and two masks give; the x blocks are stored in that order
// (XBlocks, paired layout), the two products are added as int16 (no overflow: |w| <= 31) and one
// madd / convert / FMA serves both blocks, lanes 0-3 scaled by block b, 4-7 by block b+1 (a last
// odd block alone). The f16 scales of 8 blocks are gathered and converted at once and
// multiplied by x's 8 scales in one vector multiply.

inline int load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The f16 at offset kOff of 8 consecutive blocks of kBytes, as f32.
// The same for the first c (1..7) of them, zeros after.
template <int64_t kBytes, int kOff>
DSPARK_AVX2 inline __m256 halves_partial(const uint8_t* p, int64_t c) {
  __m128i v = _mm_cvtsi32_si128(load_u16(p + kOff));
  if (c > 1) v = _mm_insert_epi16(v, load_u16(p + kBytes + kOff), 1);
  if (c > 2) v = _mm_insert_epi16(v, load_u16(p + 2 * kBytes + kOff), 2);
  if (c > 3) v = _mm_insert_epi16(v, load_u16(p + 3 * kBytes + kOff), 3);
  if (c > 4) v = _mm_insert_epi16(v, load_u16(p + 4 * kBytes + kOff), 4);
  if (c > 5) v = _mm_insert_epi16(v, load_u16(p + 5 * kBytes + kOff), 5);
  if (c > 6) v = _mm_insert_epi16(v, load_u16(p + 6 * kBytes + kOff), 6);
  return _mm256_cvtph_ps(v);
}

// Lanes < c of 8 floats at p (1 <= c <= 8), zeros after (nothing past them is read).
DSPARK_AVX2 inline __m256 load_partial(const float* p, int64_t c) {
  if (c == 8) return _mm256_loadu_ps(p);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(c)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_ps(p, mask);
}

template <int64_t kBytes, int kOff>
DSPARK_AVX2 inline __m256 halves8(const uint8_t* p) {
  __m128i v = _mm_cvtsi32_si128(load_u16(p + kOff));
  v = _mm_insert_epi16(v, load_u16(p + kBytes + kOff), 1);
  v = _mm_insert_epi16(v, load_u16(p + 2 * kBytes + kOff), 2);
  v = _mm_insert_epi16(v, load_u16(p + 3 * kBytes + kOff), 3);
  v = _mm_insert_epi16(v, load_u16(p + 4 * kBytes + kOff), 4);
  v = _mm_insert_epi16(v, load_u16(p + 5 * kBytes + kOff), 5);
  v = _mm_insert_epi16(v, load_u16(p + 6 * kBytes + kOff), 6);
  v = _mm_insert_epi16(v, load_u16(p + 7 * kBytes + kOff), 7);
  return _mm256_cvtph_ps(v);
}

// [16 bytes at a | 16 bytes at b]
DSPARK_AVX2 inline __m256i load2x128(const uint8_t* a, const uint8_t* b) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}

// The fifth bits of two Q5 blocks in the paired order: lo byte j = bit j of qh0 (j < 16), byte
// 16 + j = bit j of qh1; hi the same with bits 16 + j. 0xFF where set.
DSPARK_AVX2 inline void bits_pair(const uint8_t* qh0, const uint8_t* qh1, __m256i& lo,
                                  __m256i& hi) {
  uint32_t a, b;
  std::memcpy(&a, qh0, 4);
  std::memcpy(&b, qh1, 4);
  const __m256i src = _mm256_set1_epi64x(static_cast<int64_t>((uint64_t{b} << 32) | a));
  const __m256i pick_lo = _mm256_set_epi64x(0x0505050505050505, 0x0404040404040404,
                                            0x0101010101010101, 0x0000000000000000);
  const __m256i pick_hi = _mm256_set_epi64x(0x0707070707070707, 0x0606060606060606,
                                            0x0303030303030303, 0x0202020202020202);
  const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  const __m256i all = _mm256_set1_epi64x(-1);
  lo = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(src, pick_lo), others), all);
  hi = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(src, pick_hi), others), all);
}

// The x rows r0 .. r0+MR-1 of a tile: their bytes, scales d, sums s and pair-expanded scales dp
// (XBlocks).
template <int MR>
struct XRows {
  const int8_t* q[MR];
  const float* d[MR];
  const float* s[MR];
  const float* dp[MR];
  XRows(const XBlocks& x, int64_t r0) {
    for (int r = 0; r < MR; ++r) {
      q[r] = x.q(r0 + r);
      d[r] = x.d(r0 + r);
      s[r] = x.s(r0 + r);
      dp[r] = x.dp(r0 + r);
    }
  }
};

template <int MR, int NR>
DSPARK_AVX2 inline void set_zero(__m256 (&v)[MR][NR]) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) v[r][j] = _mm256_setzero_ps();
}

template <QuantType T>
struct Legacy;

// Each: kBytes, kSigned (values signed: sign trick), kMin (a min m at offset 2), kPaired,
// one(p): block p's 32 values in natural order; pair(p, lo, hi): blocks p and p + kBytes in the
// paired order.
template <>
struct Legacy<QuantType::q5_0> {
  static constexpr int64_t kBytes = 22;
  static constexpr bool kSigned = true, kMin = false, kPaired = true;
  // q - 16 as a byte: q4 where the fifth bit is set, q4 | 0xF0 (= q4 - 16) where it is not.
  DSPARK_AVX2 static __m256i one(const uint8_t* p) {
    const __m256i high =
        _mm256_andnot_si256(bits32(p + 2), _mm256_set1_epi8(static_cast<char>(0xF0)));
    return _mm256_or_si256(nibbles32(p + 6), high);
  }
  DSPARK_AVX2 static void pair(const uint8_t* p, __m256i& lo, __m256i& hi) {
    const __m256i v = load2x128(p + 6, p + kBytes + 6);
    const __m256i m4 = _mm256_set1_epi8(0x0F), f0 = _mm256_set1_epi8(static_cast<char>(0xF0));
    __m256i blo, bhi;
    bits_pair(p + 2, p + kBytes + 2, blo, bhi);
    lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_andnot_si256(blo, f0));
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                         _mm256_andnot_si256(bhi, f0));
  }
};

template <>
struct Legacy<QuantType::q5_1> {
  static constexpr int64_t kBytes = 24;
  static constexpr bool kSigned = false, kMin = true, kPaired = true;
  DSPARK_AVX2 static __m256i one(const uint8_t* p) {
    const __m256i high = _mm256_and_si256(bits32(p + 4), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles32(p + 8), high);
  }
  DSPARK_AVX2 static void pair(const uint8_t* p, __m256i& lo, __m256i& hi) {
    const __m256i v = load2x128(p + 8, p + kBytes + 8);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256i blo, bhi;
    bits_pair(p + 4, p + kBytes + 4, blo, bhi);
    lo = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(blo, b4));
    hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(bhi, b4));
  }
};

// The int16 pair sums of 32 products (before the madd), signed or unsigned weights.
template <bool kSigned>
DSPARK_AVX2 inline __m256i products16(__m256i w, __m256i w_abs, __m256i a) {
  if constexpr (kSigned) {
    return _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w));
  } else {
    return _mm256_maddubs_epi16(w, a);
  }
}

template <bool kSigned>
DSPARK_AVX2 inline __m256i magnitude(__m256i w) {
  if constexpr (kSigned) {
    return _mm256_sign_epi8(w, w);
  } else {
    return w;
  }
}

// The 8 lanes (as f32) of a pair of blocks, lo / hi values against x's 64 paired bytes at a, and
// of one block, values w against x's 32 bytes at a (quant_gemm.h).
template <bool kSigned>
DSPARK_AVX2_INLINE inline __m256 pair_lanes(__m256i lo, __m256i lo_abs, __m256i hi, __m256i hi_abs,
                                            const int8_t* a) {
  const __m256i p16 = _mm256_add_epi16(products16<kSigned>(lo, lo_abs, load256(a)),
                                       products16<kSigned>(hi, hi_abs, load256(a + 32)));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

template <bool kSigned>
DSPARK_AVX2_INLINE inline __m256 unit_lanes(__m256i w, __m256i w_abs, const int8_t* a) {
  return _mm256_cvtepi32_ps(
      _mm256_madd_epi16(products16<kSigned>(w, w_abs, load256(a)), _mm256_set1_epi16(1)));
}

// vpermps index: lanes 0-3 <- lane 2q, lanes 4-7 <- lane 2q + 1.
DSPARK_AVX2 inline __m256i pair_index(int q) {
  return _mm256_set_epi32(2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q, 2 * q, 2 * q, 2 * q);
}

// The f16 at offset kOff of the c blocks of a group (8 or fewer at the end of a row). (A 32-bit
// gather, or the halves assembled in general registers, were both slower here.)
template <int64_t kBytes, int kOff>
DSPARK_AVX2 inline __m256 group_halves(const uint8_t* p, int64_t c) {
  return c == 8 ? halves8<kBytes, kOff>(p) : halves_partial<kBytes, kOff>(p, c);
}

// mn[r][j]: the 8 lanes of the min term (lane b % 8 += m_b * s_b), for the wide tiles. Lanes past
// the end of a partial group add 0 * 0 (exact: the sums start at +0 and never become -0).
template <QuantType T, int MR, int NR>
DSPARK_AVX2 void legacy_mins(const XBlocks& x, int64_t r0, const uint8_t* const* wr,
                             __m256 (&mn)[MR][NR]) {
  using F = Legacy<T>;
  const int64_t nb = x.blocks;
  for (int64_t g = 0; g < nb; g += 8) {
    const int64_t c = std::min<int64_t>(8, nb - g);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256 m8 = group_halves<F::kBytes, 2>(wr[j] + g * F::kBytes, c);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
        mn[r][j] = _mm256_fmadd_ps(m8, load_partial(x.s(r0 + r) + g, c), mn[r][j]);
    }
  }
}

// The scales: per group of 8 blocks, d_w * d_x of every (x row, weight row) on the stack, a pair's
// lanes permuted out of them per x row; or, in the wide tiles of the paired formats (MR > 1 x rows
// against one weight row), the weight's d permuted once per pair and multiplied by x's
// pair-expanded dp, one multiply per x row, so that the MR accumulators, the unpacked values and
// the scales fit the 16 registers. The same products either way.
template <QuantType T, int MR, int NR>
DSPARK_AVX2 void legacy_tile(const XBlocks& x, int64_t r0, const uint8_t* const* wr, float* out) {
  using F = Legacy<T>;
  constexpr int64_t kBytes = F::kBytes;
  constexpr bool kFusedMin = F::kMin && MR == 1;
  constexpr bool kWide = F::kPaired && MR > 1 && NR == 1;
  const XRows<MR> xr(x, r0);
  __m256 acc[MR][NR], mn[MR][NR];
  set_zero(acc);
  set_zero(mn);
  const int64_t nb = x.blocks;
  for (int64_t g = 0; g < nb; g += 8) {
    const int64_t c = std::min<int64_t>(8, nb - g);
    alignas(32) float sv[kWide ? 1 : MR][NR][8];
    __m256 d8[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const uint8_t* p = wr[j] + g * kBytes;
      prefetch_ahead(p, 8 * kBytes);
      d8[j] = group_halves<kBytes, 0>(p, c);
      if constexpr (!kWide) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r)
          _mm256_store_ps(sv[r][j], _mm256_mul_ps(d8[j], load_partial(xr.d[r] + g, c)));
      }
      if constexpr (kFusedMin) {
        const __m256 m8 = group_halves<kBytes, 2>(p, c);
        mn[0][j] = _mm256_fmadd_ps(m8, load_partial(xr.s[0] + g, c), mn[0][j]);
      }
    }
    auto pair_step = [&](int q) DSPARK_AVX2_INLINE {
      const int64_t b = g + 2 * q;
      const __m256i index = pair_index(q);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        __m256i lo, hi;
        F::pair(wr[j] + b * kBytes, lo, hi);
        const __m256i lo_abs = magnitude<F::kSigned>(lo), hi_abs = magnitude<F::kSigned>(hi);
        const __m256 dw = _mm256_permutevar8x32_ps(d8[j], index);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m256 scale =
              kWide ? _mm256_mul_ps(dw, _mm256_loadu_ps(xr.dp[r] + 4 * b))
                    : _mm256_permutevar8x32_ps(_mm256_load_ps(sv[kWide ? 0 : r][j]), index);
          const __m256 lanes = pair_lanes<F::kSigned>(lo, lo_abs, hi, hi_abs, xr.q[r] + 32 * b);
          acc[r][j] = _mm256_fmadd_ps(scale, lanes, acc[r][j]);
        }
      }
    };
    auto single_step = [&](int u) DSPARK_AVX2_INLINE {
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        const uint8_t* p = wr[j] + (g + u) * kBytes;
        const __m256i w = F::one(p);
        const __m256i w_abs = magnitude<F::kSigned>(w);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m256 scale = kWide ? _mm256_set1_ps(half(p) * xr.d[r][g + u])
                                     : _mm256_broadcast_ss(&sv[kWide ? 0 : r][j][u]);
          acc[r][j] = _mm256_fmadd_ps(
              scale, unit_lanes<F::kSigned>(w, w_abs, xr.q[r] + 32 * (g + u)), acc[r][j]);
        }
      }
    };
    if constexpr (F::kPaired) {
      if (c == 8) {
        pair_step(0);
        pair_step(1);
        pair_step(2);
        pair_step(3);
      } else {
        for (int q = 0; q < c / 2; ++q) pair_step(q);
        if (c % 2) single_step(static_cast<int>(c - 1));
      }
    } else {
      if (c == 8) {
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) single_step(u);
      } else {
        for (int u = 0; u < c; ++u) single_step(u);
      }
    }
  }
  if constexpr (F::kMin && !kFusedMin) legacy_mins<T, MR, NR>(x, r0, wr, mn);
  store_tile<F::kMin ? 1 : 0>(acc, mn, out);
}

// ---- Driver of one block of weight rows --------------------------------------------------------

// Columns j0 .. j0+NR-1 (those past ncols alias the last row; their outputs are never read).
template <int NR>
inline void column_ptrs(const uint8_t* w, int64_t row_bytes, int64_t j0, int64_t ncols,
                        const uint8_t* (&wr)[NR]) {
  for (int j = 0; j < NR; ++j) wr[j] = w + std::min<int64_t>(j0 + j, ncols - 1) * row_bytes;
}

// x rows r0 .. r0+MR-1 against the block's ncols weight rows, NR at a time.
template <QuantType T, int MR, int NR>
DSPARK_AVX2 void columns(const XBlocks& x, int64_t r0, const uint8_t* w, int64_t row_bytes,
                         int64_t ncols, float* out) {
  static_assert(kCols % NR == 0);
  for (int64_t j0 = 0; j0 < ncols; j0 += NR) {
    const uint8_t* wr[NR];
    column_ptrs(w, row_bytes, j0, ncols, wr);
    legacy_tile<T, MR, NR>(x, r0, wr, out + j0);
  }
}

// A block of `rows` (1 .. R) x rows, R counted down at compile time to the tile that serves it:
// 5 to 8 rows against one weight row at a time (8 accumulators); 3 or 4 rows the same for the
// paired formats, against two weight rows for the others; 2 rows against two (fewer rows share
// each unpacked weight row: two amortise its fixed costs); a single row as decode does it (the
// faster choices measured at each row count).
template <QuantType T, int R>
DSPARK_AVX2 void row_block(const XBlocks& x, int64_t r0, int64_t rows, const uint8_t* w,
                           int64_t row_bytes, int64_t ncols, float* out) {
  if constexpr (R == 1) {
    columns<T, 1, 4>(x, r0, w, row_bytes, ncols, out);
  } else if (rows == R) {
    constexpr int kNr = R >= 5 || (R >= 3 && paired_blocks(T)) ? 1 : 2;
    columns<T, R, kNr>(x, r0, w, row_bytes, ncols, out);
  } else {
    row_block<T, R - 1>(x, r0, rows, w, row_bytes, ncols, out);
  }
}

template <QuantType T>
DSPARK_AVX2 void block_type(const XBlocks& x, int64_t m, const uint8_t* w, int64_t row_bytes,
                            int64_t ncols, float* out) {
  if (m == 1) return columns<T, 1, 4>(x, 0, w, row_bytes, ncols, out);  // NR 2 and 8: slower
  for (int64_t r0 = 0; r0 < m; r0 += 8)
    row_block<T, 8>(x, r0, std::min<int64_t>(8, m - r0), w, row_bytes, ncols, out + r0 * kCols);
}

}  // namespace

void block_avx2(QuantType type, const XBlocks& x, int64_t m, const uint8_t* w, int64_t row_bytes,
                int64_t ncols, float* out) {
  switch (type) {
    case QuantType::q5_0:
      return block_type<QuantType::q5_0>(x, m, w, row_bytes, ncols, out);
    case QuantType::q5_1:
      return block_type<QuantType::q5_1>(x, m, w, row_bytes, ncols, out);
    default:  // the block-sum formats: quant_gemm_x8.cpp
      return;
  }
}

// ---- x rows -------------------------------------------------------------------------------------

// quantize_x_row's arithmetic (quant_gemm.cpp) 8 lanes at a time: the same IEEE operations
// (max of magnitudes, one division, one multiply per value, round to nearest even), so the same
// bytes and scales.
DSPARK_AVX2 void quantize_x_row_avx2(const float* v, int64_t k, bool paired, uint8_t* dst) {
  const int64_t nb = k / 32;
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + k);
  float* s = d + nb;
  auto* isum = reinterpret_cast<int32_t*>(d + 6 * nb);
  const __m256 sign = _mm256_set1_ps(-0.0f), fmax = _mm256_set1_ps(3.402823466e38f);
  for (int64_t b = 0; b < nb; ++b) {
    __m256 x[4], a[4];
    int finite = 0xFF;
    for (int i = 0; i < 4; ++i) {
      x[i] = _mm256_loadu_ps(v + 32 * b + 8 * i);
      a[i] = _mm256_andnot_ps(sign, x[i]);
      finite &= _mm256_movemask_ps(_mm256_cmp_ps(a[i], fmax, _CMP_LE_OQ));
    }
    const __m256 m8 = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    alignas(32) int8_t bytes[32];
    if (finite != 0xFF || amax < kTinyXBlock) {
      std::memset(bytes, 0, 32);
      d[b] = s[b] = finite == 0xFF ? 0.0f : std::nanf("");
      isum[b] = isum[nb + b] = 0;
    } else {
      const __m256 inv = _mm256_set1_ps(127.0f / amax);
      __m256i qi[4];
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        qi[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x[i], inv),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum = _mm256_add_epi32(sum, qi[i]);
      }
      // packs interleave the 128-bit halves: 4-byte groups come out in order 0 2 4 6 1 3 5 7.
      const __m256i p16 =
          _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(bytes),
          _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
      // sum16: values 0..15 (qi[0], qi[1]); then all 32.
      const __m256i first = _mm256_add_epi32(qi[0], qi[1]);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(first), _mm256_extracti128_si256(first, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      isum[nb + b] = _mm_cvtsi128_si32(s4);
      s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      d[b] = amax / 127.0f;
      s[b] = d[b] * static_cast<float>(_mm_cvtsi128_si32(s4));
      isum[b] = _mm_cvtsi128_si32(s4);
    }
    if (paired && (b / 2) * 2 + 1 < nb) {
      // Blocks 2p and 2p+1: [2p: 0..15][2p+1: 0..15][2p: 16..31][2p+1: 16..31].
      int8_t* base = q + 64 * (b / 2) + 16 * (b % 2);
      std::memcpy(base, bytes, 16);
      std::memcpy(base + 32, bytes + 16, 16);
      std::fill_n(s + nb + 4 * b, 4, d[b]);  // dp (XBlocks)
    } else {
      std::memcpy(q + 32 * b, bytes, 32);
    }
  }
}

}  // namespace dspark::cpu::quant_gemm_detail

#endif  // __x86_64__
