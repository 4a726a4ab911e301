// Included twice by quant_gemm_x8.cpp, once per instruction set (X8_NS, X8_TARGET, X8_VNNI): the
// tiles of the block-sum formats on weights in the interleaved layout (quant_pack.h).
//
// A tile is MR x rows by NG groups of 8 weight rows. Per block of 32 values and group, the values
// are unpacked into 8 registers of "steps" (step s: values 4s' .. 4s'+3 of the block for the 8
// rows, s' = s for Q8_0 / Q8_A and Q4_K's units; for the other nibble formats steps 0-3 are the low
// nibbles of the 4 chunks, values 4t .. 4t+3, and 4-7 the high ones, values 16+4t .., with Q5's
// fifth bits added as bit 4), each multiplied with the 4 x bytes of those values broadcast to the
// 8 lanes: VNNI's vpdpbusd adds the 4 products into the row's int32 lane; AVX2 adds pairs with
// vpmaddubsw into int16 (exact: 4-bit weights give at most 16 products of 15 * 127 per lane, 5-bit
// ones go in 2 or 4 partial sums, at most 8 products of 31 * 127) and widens once per block with
// vpmaddwd (Q8_0, Q8_A: signs moved onto x, one vpmaddwd per step; Q8_A's unsigned bytes less
// 128 there, the offset settled with x's block sum). The 8 int32 block sums are then
// converted and scaled at once (Q4_K: the same per unit of 32 values, its 8 rows' 6-bit scales and
// mins turned into f32 d * sc and -dmin * m once per super-block and unit, shared by every x row;
// the MLX group types: each unit of 32 values as a Q4_1 / Q8_A block, the group's d and m loaded
// once).
// The integer sums are exact, so both instruction sets give the same bits (quant_gemm.h).
// Registers: VNNI has 32, AVX2 16, hence the wider VNNI tiles; at one x row the block's steps go
// into 2-4 partial sums per group so that the vpdpbusd chains do not wait on each other (AVX2's
// 4-bit formats: one int16 sum per block). On AVX2 an unpacked block of 8 registers does not fit
// beside the accumulators, so Q4_K, Q6_K and (at several x rows) the other 4-bit formats unpack
// a step at a time and multiply it with every x row of the tile at once (k4_unit_sums,
// q6_unit_sums, nibble_block_sums; Q6_K's scales go into its vpmaddwd).

namespace X8_NS {

constexpr int kCols = static_cast<int>(kBlockCols);

// Q4_K's units of 32 values take the place of the legacy blocks (kBlock, kHead: its super-block
// of 8 units and the parts before the nibbles, quant_pack.h). The MLX group types are kUnits
// blocks of their unit type kUnit (Q4_1, Q8_A) sharing one head: each unit runs as kUnit's block.
template <QuantType T>
struct X8Format {
  static constexpr bool kGroups = T == QuantType::q4_a64 || T == QuantType::q4_a128 ||
                                  T == QuantType::q8_a64 || T == QuantType::q8_a128;
  static constexpr QuantType kUnit =
      (T == QuantType::q4_a64 || T == QuantType::q4_a128)   ? QuantType::q4_1
      : (T == QuantType::q8_a64 || T == QuantType::q8_a128) ? QuantType::q8_a
                                                            : T;
  static constexpr bool kSuper =
      T == QuantType::q4_k || T == QuantType::q5_k || T == QuantType::q6_k;
  // Units of 32 per block.
  static constexpr int64_t kUnits = kSuper                                               ? 8
                                    : (T == QuantType::q4_a64 || T == QuantType::q8_a64) ? 2
                                    : kGroups                                            ? 4
                                                                                         : 1;
  // The bytes of a unit's values in the 8 rows (the MLX group types).
  static constexpr int64_t kUnitBytes = kUnit == QuantType::q4_1 ? 128 : 256;
  static constexpr int64_t kBlock = T == QuantType::q4_0   ? 18
                                    : T == QuantType::q4_1 ? 20
                                    : T == QuantType::q5_0 ? 22
                                    : T == QuantType::q5_1 ? 24
                                    : T == QuantType::q4_k ? 144
                                    : T == QuantType::q5_k ? 176
                                    : T == QuantType::q6_k ? 210
                                    : T == QuantType::q8_a ? 36
                                    : kGroups              ? 4 + kUnits * kUnitBytes / 8
                                                           : 34;
  static constexpr int64_t kGroupBlock = 8 * kBlock;  // one block (super-block) of the 8 rows
  // The bytes before the values: the f16 d[8] (and m[8]), Q5's fifth bits; Q4_K's d, dmin,
  // scales and mins.
  static constexpr int kHead = (kUnit == QuantType::q4_1 || kUnit == QuantType::q8_a) ? 32
                               : T == QuantType::q5_0                                 ? 48
                               : T == QuantType::q5_1                                 ? 64
                               : (T == QuantType::q4_k || T == QuantType::q5_k)       ? 128
                                                                                      : 16;
  static constexpr bool kBytes = kUnit == QuantType::q8_0 || kUnit == QuantType::q8_a;  // 8-bit
  static constexpr bool kNibbles = !kBytes;
  static constexpr bool kFifth = T == QuantType::q5_0 || T == QuantType::q5_1;  // at kHead - 32
  static constexpr bool kMin = kUnit == QuantType::q4_1 || T == QuantType::q5_1 ||
                               T == QuantType::q4_k || T == QuantType::q5_k ||
                               kUnit == QuantType::q8_a;
  // Step s covers values 4s .. 4s+3 of the unit (Q8_0, Q8_A, the k-quants), or of the nibble
  // order.
  static constexpr bool kNaturalSteps = kBytes || kSuper;
};

X8_TARGET inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

X8_TARGET inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The 8 steps of block b of a group (the weights as the multiply takes them: unsigned bytes; for
// Q8_0 on AVX2 the signed values, for Q8_A on AVX2 the bytes less 128).
template <QuantType T>
X8_TARGET inline void unpack_steps(const uint8_t* gb, __m256i (&w)[8]) {
  using F = X8Format<T>;
  const uint8_t* q = gb + F::kHead;
  if constexpr (F::kSuper) {
    static_assert(!F::kSuper, "k-quants: unpack_k4_unit, unpack_k6_unit");
  } else if constexpr (F::kNibbles) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m256i raw = load256(q + 32 * t);
      w[t] = _mm256_and_si256(raw, m4);
      w[t + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    }
    if constexpr (F::kFifth) {
      // Step s's fifth bits are bit s of each byte (quant_pack.h), moved to bit 4.
      const __m256i h = load256(q - 32), b4 = _mm256_set1_epi8(0x10);
      w[0] = _mm256_or_si256(w[0], _mm256_and_si256(_mm256_slli_epi16(h, 4), b4));
      w[1] = _mm256_or_si256(w[1], _mm256_and_si256(_mm256_slli_epi16(h, 3), b4));
      w[2] = _mm256_or_si256(w[2], _mm256_and_si256(_mm256_slli_epi16(h, 2), b4));
      w[3] = _mm256_or_si256(w[3], _mm256_and_si256(_mm256_slli_epi16(h, 1), b4));
      w[4] = _mm256_or_si256(w[4], _mm256_and_si256(h, b4));
      w[5] = _mm256_or_si256(w[5], _mm256_and_si256(_mm256_srli_epi16(h, 1), b4));
      w[6] = _mm256_or_si256(w[6], _mm256_and_si256(_mm256_srli_epi16(h, 2), b4));
      w[7] = _mm256_or_si256(w[7], _mm256_and_si256(_mm256_srli_epi16(h, 3), b4));
    }
  } else {
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      w[s] = load256(q + 32 * s);
      if constexpr (!X8_VNNI) w[s] = _mm256_xor_si256(w[s], _mm256_set1_epi8(-128));
    }
  }
}

// Step s (0..7) of unit u (0..7) of a Q4_K / Q5_K group super-block at gb: the low nibbles of
// its pair of units for u even, the high ones for u odd; Q5_K's fifth bits (bit u of qh) as bit 4.
template <QuantType T>
X8_TARGET inline __m256i k4_step(const uint8_t* gb, int u, int s) {
  const __m256i raw = load256(gb + X8Format<T>::kHead + 256 * (u / 2) + 32 * s);
  __m256i w = _mm256_and_si256(u % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
  if constexpr (T == QuantType::q5_k) {
    const __m256i h = _mm256_srli_epi16(load256(gb + 1152 + 32 * s), u);
    w = _mm256_or_si256(w, _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi8(1)), 4));
  }
  return w;
}

#if X8_VNNI
// The 8 steps of unit u of a Q4_K / Q5_K group super-block.
template <QuantType T>
X8_TARGET inline void unpack_k4_unit(const uint8_t* gb, int u, __m256i (&w)[8]) {
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) w[s] = k4_step<T>(gb, u, s);
}
#endif

#if !X8_VNNI
// The int32 sums of MR x rows (their unit's 32 bytes at a[r]) against unit u of a Q4_K / Q5_K
// group super-block at gb, as block_sums gives them from k4_step's steps (Q4_K in one
// int16 partial sum, Q5_K's 5-bit values in two: at most 8 products of 31 * 128 each): each step
// is unpacked once for the MR rows and multiplied at once, so the tile keeps no unpacked unit in
// registers (with the scales, mins and accumulators they spill on AVX2).
template <QuantType T, int MR>
X8_TARGET inline void k4_unit_sums(const uint8_t* gb, int u, const int8_t* const (&a)[MR],
                                   __m256i (&out)[MR]) {
  constexpr int P = T == QuantType::q5_k ? 2 : 1;
  __m256i part[MR][P];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < P; ++p) part[r][p] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    const __m256i w = k4_step<T>(gb, u, s);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
      part[r][s * P / 8] =
          _mm256_add_epi16(part[r][s * P / 8], _mm256_maddubs_epi16(w, bcast4(a[r] + 4 * s)));
  }
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    out[r] = _mm256_madd_epi16(part[r][0], ones);
    if constexpr (P == 2) out[r] = _mm256_add_epi32(out[r], _mm256_madd_epi16(part[r][1], ones));
  }
}
#endif

#if !X8_VNNI
// The int32 sums of MR x rows (their block's 32 bytes at a[r], block sums sum[r]) against the 8
// rows of a Q4_0 / Q4_1 block whose nibbles are at q, as block_sums gives them from unpack_steps
// in one partial sum: each 32-byte chunk is loaded once for its low and high nibbles and
// multiplied for the MR rows at once, so no unpacked block stays in registers.
template <QuantType T, int MR>
X8_TARGET inline void nibble_block_sums(const uint8_t* q, const int8_t* const (&a)[MR],
                                        const int32_t (&sum)[MR], __m256i (&out)[MR]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i part[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) part[r] = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) {
    const __m256i raw = load256(q + 32 * t);
    const __m256i lo = _mm256_and_si256(raw, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
      part[r] = _mm256_add_epi16(
          part[r], _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(a[r] + 4 * t)),
                                    _mm256_maddubs_epi16(hi, bcast4(a[r] + 16 + 4 * t))));
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    out[r] = _mm256_madd_epi16(part[r], _mm256_set1_epi16(1));
    if constexpr (T == QuantType::q4_0)  // stored value + 8
      out[r] = _mm256_sub_epi32(out[r], _mm256_set1_epi32(8 * sum[r]));
  }
}
#endif

// Step c (values 4c .. 4c+3 of the 8 rows) of unit 4h + t of a Q6_K group super-block: the low 4
// bits from ql (t < 2: low nibbles), bits 4-5 from bits 2t .. 2t+1 of qh with one shift (none for
// t = 2) and one mask (16-bit shifts: the bits a shift carries into a neighbouring byte are
// masked).
X8_TARGET inline __m256i k6_step(const uint8_t* ql, const uint8_t* qh, int t, int c) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i lo = load256(ql + 32 * c), hi = load256(qh + 32 * c);
  const __m256i l4 = _mm256_and_si256(t >= 2 ? _mm256_srli_epi16(lo, 4) : lo, m4);
  const __m256i h = t == 0   ? _mm256_slli_epi16(hi, 4)
                    : t == 1 ? _mm256_slli_epi16(hi, 2)
                    : t == 2 ? hi
                             : _mm256_srli_epi16(hi, 2);
  return _mm256_or_si256(l4, _mm256_and_si256(h, m30));
}

#if X8_VNNI
// 8 int8 at p as int32 lanes.
X8_TARGET inline __m256i int8x8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The 8 steps of unit u (0..7) of a Q6_K group super-block at gb: the unsigned 6-bit values q
// (the weight is q - 32), low 4 bits from ql, high 2 from qh (core/quant.h, quant_pack.h).
X8_TARGET inline void unpack_k6_unit(const uint8_t* gb, int u, __m256i (&w)[8]) {
  const int h = u / 4, t = u % 4;
  const uint8_t* ql = gb + 144 + 32 * (16 * h + 8 * (t % 2));
  const uint8_t* qh = gb + 144 + 32 * (32 + 8 * h);
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) w[c] = k6_step(ql, qh, t, c);
}

// The int32 sums of one x row against a Q6_K unit's 8 rows: sc_a * (sum of the products of values
// 0..15) + sc_b * (that of 16..31), the weights q - 32 (the offset settled with x's sums: sum16
// of values 0..15, sum of all 32).
X8_TARGET inline __m256i q6_sums(const __m256i (&w)[8], const int8_t* a, int32_t sum, int32_t sum16,
                                 __m256i sc_a, __m256i sc_b) {
  __m256i half[2] = {_mm256_set1_epi32(-32 * sum16), _mm256_set1_epi32(-32 * (sum - sum16))};
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s)
    half[s / 4] = _mm256_dpbusd_epi32(half[s / 4], w[s], bcast4(a + 4 * s));
  return _mm256_add_epi32(_mm256_mullo_epi32(half[0], sc_a), _mm256_mullo_epi32(half[1], sc_b));
}
#else
// The int32 sums of MR x rows (their unit's 32 bytes at a[r], block sums sum[r], sum16[r]) against
// unit u of a Q6_K group super-block at gb: sc_a * (sum of the products of values 0..15) + sc_b *
// (that of 16..31), the weights q - 32. Each pair of steps is unpacked once for the MR rows and
// its int16 pair sums (at most 4 products of 63 * 128) are widened by vpmaddwd with the rows'
// scales, so the scales cost no multiply of their own; the offset -32 * (sc_a * sum16 + sc_b *
// (sum - sum16)) is one more vpmaddwd. The same integers as VNNI's q6_sums, so the same bits.
template <int MR>
X8_TARGET inline void q6_unit_sums(const uint8_t* gb, int u, const int8_t* const (&a)[MR],
                                   const int32_t (&sum)[MR], const int32_t (&sum16)[MR],
                                   __m256i (&out)[MR]) {
  const int h = u / 4, t = u % 4;
  const uint8_t* ql = gb + 144 + 32 * (16 * h + 8 * (t % 2));
  const uint8_t* qh = gb + 144 + 32 * (32 + 8 * h);
  const __m128i sa = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 16 + 16 * u));
  const __m128i sb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(gb + 24 + 16 * u));
  // Row r's 32-bit lane: its scale in both int16 halves; for the offset, (sc_a, sc_b).
  const __m256i sc[2] = {_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sa)),
                         _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sb, sb))};
  const __m256i sab = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sa, sb));
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    const uint32_t pair = static_cast<uint16_t>(sum16[r]) |
                          static_cast<uint32_t>(static_cast<uint16_t>(sum[r] - sum16[r])) << 16;
    const __m256i off = _mm256_madd_epi16(sab, _mm256_set1_epi32(static_cast<int32_t>(pair)));
    out[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 8; c += 2) {
    const __m256i w0 = k6_step(ql, qh, t, c), w1 = k6_step(ql, qh, t, c + 1);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast4(a[r] + 4 * c)),
                                           _mm256_maddubs_epi16(w1, bcast4(a[r] + 4 * c + 4)));
      out[r] = _mm256_add_epi32(out[r], _mm256_madd_epi16(p16, sc[c / 4]));
    }
  }
}
#endif

// The 6-bit scales and mins of a Q4_K group super-block as bytes (quant_pack.h): byte 8u' + r of
// sm[0] = sc[u'] of row r, sm[1] sc[u' + 4], sm[2] m[u'], sm[3] m[u' + 4] (u' = 0..3). Kept in
// registers: read back through a stack buffer in pieces of 8 bytes they cost more than the
// rest of the tile (the loads wait for the wider stores).
X8_TARGET inline void k4_scales_mins(const uint8_t* gb, __m256i (&sm)[4]) {
  const __m256i sl = load256(gb + 32), ml = load256(gb + 64), h = load256(gb + 96);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  sm[0] = _mm256_or_si256(_mm256_and_si256(sl, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
  sm[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(sl, 4), m4),
                          _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
  sm[2] = _mm256_or_si256(_mm256_and_si256(ml, m4), _mm256_and_si256(h, m30));
  sm[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ml, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
}

// Bytes 8u .. 8u+7 of v (u = 0..3) as f32 lanes.
X8_TARGET inline __m256 bytes8_ps(__m256i v, int u) {
  __m128i h = u / 2 ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
  if (u % 2) h = _mm_unpackhi_epi64(h, h);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h));
}

// The x offset of step s's 4 bytes within the block.
template <QuantType T>
constexpr int step_offset(int s) {
  if constexpr (!X8Format<T>::kNaturalSteps) {
    return s < 4 ? 4 * s : 16 + 4 * (s - 4);
  } else {
    return 4 * s;
  }
}

// The int32 block sums of one x row (its block's 32 bytes at a, int sum `sum`) against the 8 rows
// of a group's unpacked steps, in P partial sums.
template <QuantType T, int P>
X8_TARGET inline __m256i block_sums(const __m256i (&w)[8], const int8_t* a, int32_t sum) {
  // The weight's offset: Q4_0 stores q = value + 8, Q5_0 value + 16, Q8_0 (VNNI) value + 128;
  // Q8_A on AVX2 multiplies value - 128.
  constexpr int32_t kOffset = T == QuantType::q4_0                 ? 8
                              : T == QuantType::q5_0               ? 16
                              : (T == QuantType::q8_0 && X8_VNNI)  ? 128
                              : (T == QuantType::q8_a && !X8_VNNI) ? -128
                                                                   : 0;
  __m256i part[P];
#if X8_VNNI
  part[0] = _mm256_set1_epi32(-kOffset * sum);
#pragma GCC unroll 4
  for (int p = 1; p < P; ++p) part[p] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s)
    part[s % P] = _mm256_dpbusd_epi32(part[s % P], w[s], bcast4(a + step_offset<T>(s)));
#else
  const __m256i ones = _mm256_set1_epi16(1);
  // 5-bit values (Q5_0, Q5_1, Q5_K): at most 4 steps (8 products of 31 * 127) per int16 partial
  // sum.
  static_assert(!(X8Format<T>::kFifth || T == QuantType::q5_k) || P >= 2);
  if constexpr (X8Format<T>::kNibbles) {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) part[p] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s)
      part[s % P] =
          _mm256_add_epi16(part[s % P], _mm256_maddubs_epi16(w[s], bcast4(a + step_offset<T>(s))));
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) part[p] = _mm256_madd_epi16(part[p], ones);
  } else {
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) part[p] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i xs = _mm256_sign_epi8(bcast4(a + step_offset<T>(s)), w[s]);
      part[s % P] = _mm256_add_epi32(
          part[s % P],
          _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w[s], w[s]), xs), ones));
    }
  }
  if constexpr (kOffset != 0) part[0] = _mm256_sub_epi32(part[0], _mm256_set1_epi32(kOffset * sum));
#endif
  if constexpr (P == 4) {
    return _mm256_add_epi32(_mm256_add_epi32(part[0], part[1]), _mm256_add_epi32(part[2], part[3]));
  } else if constexpr (P == 2) {
    return _mm256_add_epi32(part[0], part[1]);
  } else {
    return part[0];
  }
}

// Software prefetch runs kPrefetchAhead bytes ahead in each group's own stream of blocks: a
// thread's weight rows come in tiles of 2 groups (kCols rows) one after the other, so group j's
// stream goes on in the next tile's group j, one group further on in memory (a plain distance
// from the current address lands in the other group of the tile when a group is a little shorter
// than the distance, as at k = 1536, and fetches nothing useful).
constexpr int64_t kPrefetchAhead = 8192;

// The address distance of that prefetch at each block of a group's stream: kPrefetchAhead plus
// one group per group boundary that the stream position b * block_bytes + kPrefetchAhead has
// passed (`skip` of them so far; `cross` the position b reaches the next boundary at).
class PrefetchStream {
 public:
  PrefetchStream(int64_t blocks, int64_t block_bytes)
      : block_(block_bytes),
        group_(blocks * block_bytes),
        skip_(kPrefetchAhead / group_),
        cross_((skip_ + 1) * group_ - kPrefetchAhead) {}
  // The distance at block b (b = 0, 1, ... in turn).
  int64_t ahead(int64_t b) {
    if (b * block_ >= cross_) {
      ++skip_;
      cross_ += group_;
    }
    return kPrefetchAhead + skip_ * group_;
  }

 private:
  int64_t block_, group_, skip_, cross_;
};

// The `bytes` bytes at p + ahead into L2.
X8_TARGET inline void prefetch_block(const uint8_t* p, int64_t ahead, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + ahead + o), _MM_HINT_T1);
}

template <QuantType T, int MR, int NG>
X8_TARGET void x8_tile(const XBlocks& x, int64_t r0, const uint8_t* const* g, float* out) {
  using F = X8Format<T>;
  // AVX2, 4-bit values: one int16 sum per block holds its 16 products per lane (at most
  // 16 * 15 * 128 = 30,720), so a single partial sum needs one vpmaddwd instead of P.
  constexpr bool kFourBit =
      F::kUnit == QuantType::q4_0 || F::kUnit == QuantType::q4_1 || T == QuantType::q4_k;
  constexpr int P = (!X8_VNNI && kFourBit) ? 1 : MR * NG <= 2 ? 4 : 2;
  const int8_t* xq[MR];
  const float* xd[MR];
  const float* xs[MR];
  const int32_t* xsum[MR];
  const int32_t* xsum16[MR];
  for (int r = 0; r < MR; ++r) {
    xq[r] = x.q(r0 + r);
    xd[r] = x.d(r0 + r);
    xs[r] = x.s(r0 + r);
    xsum[r] = x.sum(r0 + r);
    xsum16[r] = x.sum16(r0 + r);
  }
  __m256 acc[MR][NG];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < NG; ++j) acc[r][j] = _mm256_setzero_ps();
  const int64_t nb = x.blocks / F::kUnits;
  PrefetchStream stream(nb, F::kGroupBlock);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t ahead = stream.ahead(b);
#pragma GCC unroll 2
    for (int j = 0; j < NG; ++j) {
      const uint8_t* gb = g[j] + b * F::kGroupBlock;
      prefetch_block(gb, ahead, F::kGroupBlock);
      // Per unit u of 32 values (a block; Q4_K: unit 8b + i of its super-block), the 8 rows'
      // scale dw and min mw, then every x row's block sums scaled into its accumulator.
      // (Q6_K: sc_a, sc_b the 8 rows' int8 scales of the unit's two halves.)
      auto unit = [&](int64_t u, const __m256i(&w)[8], __m256 dw, __m256 mw, __m256i sc_a,
                      __m256i sc_b) X8_INLINE {
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          __m256i sums;
          if constexpr (T == QuantType::q6_k) {
#if X8_VNNI
            sums = q6_sums(w, xq[r] + 32 * u, xsum[r][u], xsum16[r][u], sc_a, sc_b);
#endif
          } else {
            sums = block_sums<F::kUnit, P>(w, xq[r] + 32 * u, xsum[r][u]);
          }
          const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[r][u]));
          acc[r][j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[r][j]);
          if constexpr (F::kMin)
            acc[r][j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xs[r][u]), acc[r][j]);
        }
      };
      // The same for block sums already taken (the AVX2 tiles that unpack step by step).
      [[maybe_unused]] auto add_sums = [&](int64_t u, const __m256i(&sums)[MR], __m256 dw,
                                           __m256 mw) X8_INLINE {
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[r][u]));
          acc[r][j] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums[r]), acc[r][j]);
          if constexpr (F::kMin)
            acc[r][j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xs[r][u]), acc[r][j]);
        }
      };
      // Unit u's 32 x bytes of each row.
      [[maybe_unused]] auto x_rows = [&](int64_t u, const int8_t*(&a)[MR]) X8_INLINE {
        for (int r = 0; r < MR; ++r) a[r] = xq[r] + 32 * u;
      };
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb)));
      __m256 m = _mm256_setzero_ps();
      if constexpr (F::kMin)
        m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + 16)));
      __m256i w[8];
      if constexpr (T == QuantType::q4_k || T == QuantType::q5_k) {
        // dw = d * sc_u (exact in f32), mw = -dmin * m_u: the min is subtracted.
        __m256i sm[4];
        k4_scales_mins(gb, sm);
        m = _mm256_xor_ps(m, _mm256_set1_ps(-0.0f));
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const __m256 dw = _mm256_mul_ps(d, bytes8_ps(sm[i / 4], i % 4));
          const __m256 mw = _mm256_mul_ps(m, bytes8_ps(sm[2 + i / 4], i % 4));
#if X8_VNNI
          unpack_k4_unit<T>(gb, i, w);
          unit(8 * b + i, w, dw, mw, __m256i{}, __m256i{});
#else
          const int8_t* a[MR];
          x_rows(8 * b + i, a);
          __m256i sums[MR];
          k4_unit_sums<T, MR>(gb, i, a, sums);
          add_sums(8 * b + i, sums, dw, mw);
#endif
        }
      } else if constexpr (T == QuantType::q6_k) {
#if X8_VNNI
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          unpack_k6_unit(gb, i, w);
          unit(8 * b + i, w, d, m, int8x8(gb + 16 + 16 * i), int8x8(gb + 24 + 16 * i));
        }
#else
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const int64_t u = 8 * b + i;
          const int8_t* a[MR];
          x_rows(u, a);
          int32_t sum[MR], sum16[MR];
          for (int r = 0; r < MR; ++r) {
            sum[r] = xsum[r][u];
            sum16[r] = xsum16[r][u];
          }
          __m256i sums[MR];
          q6_unit_sums<MR>(gb, i, a, sum, sum16, sums);
          add_sums(u, sums, d, m);
        }
#endif
#if !X8_VNNI
      } else if constexpr (kFourBit && MR > 1) {
        // Q4_0, Q4_1 and the MLX 4-bit groups (each unit a Q4_1 block with the group's d, m),
        // several x rows (at one row the unpacked block fits in registers and this gains nothing).
#pragma GCC unroll 4
        for (int i = 0; i < F::kUnits; ++i) {
          const int64_t u = F::kUnits * b + i;
          const int8_t* a[MR];
          x_rows(u, a);
          int32_t sum[MR];
          for (int r = 0; r < MR; ++r) sum[r] = xsum[r][u];
          __m256i sums[MR];
          nibble_block_sums<F::kUnit, MR>(
              gb + (F::kGroups ? F::kUnitBytes * i : 0) + X8Format<F::kUnit>::kHead, a, sum, sums);
          add_sums(u, sums, d, m);
        }
#endif
      } else if constexpr (F::kGroups) {
        // Each unit as a block of kUnit with the group's d and m.
#pragma GCC unroll 4
        for (int i = 0; i < F::kUnits; ++i) {
          unpack_steps<F::kUnit>(gb + F::kUnitBytes * i, w);
          unit(F::kUnits * b + i, w, d, m, __m256i{}, __m256i{});
        }
      } else {
        unpack_steps<T>(gb, w);
        unit(b, w, d, m, __m256i{}, __m256i{});
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < NG; ++j) _mm256_storeu_ps(out + r * kCols + 8 * j, acc[r][j]);
}

#if X8_VNNI
// The formats whose tiles of two groups run on 512-bit registers (x8_tile_z).
template <QuantType T>
constexpr bool kZmmTile = T == QuantType::q4_0 || T == QuantType::q4_1 || T == QuantType::q8_0 ||
                          T == QuantType::q4_k || T == QuantType::q5_k;

// (The masked intrinsics with every lane set here and below are the plain instructions: the
// unmasked ones read an undefined register, which GCC 12 reports as uninitialized.)
// [32 bytes at a | 32 bytes at b].
X8_TARGET inline __m512i load_pair(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti32x8(_mm512_castsi256_si512(load256(a)), load256(b), 1);
}
// [a | b] of f32.
X8_TARGET inline __m512 pair_ps(__m256 a, __m256 b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
}
// The 8 f16 at a then the 8 at b as 16 f32.
X8_TARGET inline __m512 halves_pair(const uint8_t* a, const uint8_t* b) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
  return _mm512_maskz_cvtph_ps(0xFFFF, h);
}
// k4_step of two group super-blocks at once (g0's rows low, g1's high).
template <QuantType T>
X8_TARGET inline __m512i k4_step_pair(const uint8_t* g0, const uint8_t* g1, int u, int s) {
  const int64_t at = X8Format<T>::kHead + 256 * (u / 2) + 32 * s;
  const __m512i raw = load_pair(g0 + at, g1 + at);
  __m512i w = _mm512_and_si512(u % 2 ? _mm512_srli_epi16(raw, 4) : raw, _mm512_set1_epi8(0x0F));
  if constexpr (T == QuantType::q5_k) {
    const __m512i h = _mm512_srli_epi16(load_pair(g0 + 1152 + 32 * s, g1 + 1152 + 32 * s), u);
    w = _mm512_or_si512(w, _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(1)), 4));
  }
  return w;
}

// x8_tile<T, MR, 2> with both groups in one 512-bit register (group g[0]'s 8 rows in the low
// half, g[1]'s in the high half): per block (Q4_K / Q5_K: unit of 32 values) and x row 8 vpdpbusd
// instead of 16, the x bytes broadcast once for both groups, one scale step. Per lane the same
// integers and the same f32 operations in the same order, so the same bits. Worth it where a core
// executes 512-bit operations at full width (Sapphire Rapids: twice the dot products per cycle of
// 256-bit ones).
template <QuantType T, int MR>
X8_TARGET void x8_tile_z(const XBlocks& x, int64_t r0, const uint8_t* const* g, float* out) {
  using F = X8Format<T>;
  static_assert(kZmmTile<T>);
  constexpr int P = MR == 1 ? 4 : 2;
  constexpr int32_t kOffset = T == QuantType::q4_0 ? 8 : T == QuantType::q8_0 ? 128 : 0;
  const int8_t* xq[MR];
  const float* xd[MR];
  const float* xs[MR];
  const int32_t* xsum[MR];
  for (int r = 0; r < MR; ++r) {
    xq[r] = x.q(r0 + r);
    xd[r] = x.d(r0 + r);
    xs[r] = x.s(r0 + r);
    xsum[r] = x.sum(r0 + r);
  }
  __m512 acc[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  // Unit u's block sums of every x row against the steps w, scaled by dw, the min term mw.
  auto unit = [&](int64_t u, const __m512i(&w)[8], __m512 dw, __m512 mw) X8_INLINE {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const int8_t* a = xq[r] + 32 * u;
      __m512i part[P];
      part[0] = _mm512_set1_epi32(-kOffset * xsum[r][u]);
#pragma GCC unroll 4
      for (int p = 1; p < P; ++p) part[p] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        int32_t v;
        std::memcpy(&v, a + step_offset<T>(s), 4);
        part[s % P] = _mm512_dpbusd_epi32(part[s % P], w[s], _mm512_set1_epi32(v));
      }
      __m512i sums;
      if constexpr (P == 4) {
        sums = _mm512_add_epi32(_mm512_add_epi32(part[0], part[1]),
                                _mm512_add_epi32(part[2], part[3]));
      } else {
        sums = _mm512_add_epi32(part[0], part[1]);
      }
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[r][u]));
      acc[r] = _mm512_fmadd_ps(scale, _mm512_maskz_cvtepi32_ps(0xFFFF, sums), acc[r]);
      if constexpr (F::kMin) acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xs[r][u]), acc[r]);
    }
  };
  const int64_t nb = x.blocks / F::kUnits;
  PrefetchStream stream(nb, F::kGroupBlock);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t ahead = stream.ahead(b);
    const uint8_t* g0 = g[0] + b * F::kGroupBlock;
    const uint8_t* g1 = g[1] + b * F::kGroupBlock;
    prefetch_block(g0, ahead, F::kGroupBlock);
    prefetch_block(g1, ahead, F::kGroupBlock);
    const __m512 d = halves_pair(g0, g1);
    __m512 m = _mm512_setzero_ps();
    if constexpr (F::kMin) m = halves_pair(g0 + 16, g1 + 16);
    __m512i w[8];
    if constexpr (F::kSuper) {
      // As x8_tile's Q4_K / Q5_K: dw = d * sc_u (exact in f32), mw = -dmin * m_u.
      __m256i sm0[4], sm1[4];
      k4_scales_mins(g0, sm0);
      k4_scales_mins(g1, sm1);
      m = _mm512_xor_ps(m, _mm512_set1_ps(-0.0f));
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const __m512 dw =
            _mm512_mul_ps(d, pair_ps(bytes8_ps(sm0[i / 4], i % 4), bytes8_ps(sm1[i / 4], i % 4)));
        const __m512 mw = _mm512_mul_ps(
            m, pair_ps(bytes8_ps(sm0[2 + i / 4], i % 4), bytes8_ps(sm1[2 + i / 4], i % 4)));
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) w[s] = k4_step_pair<T>(g0, g1, i, s);
        unit(8 * b + i, w, dw, mw);
      }
    } else {
      const uint8_t* q0 = g0 + F::kHead;
      const uint8_t* q1 = g1 + F::kHead;
      if constexpr (F::kNibbles) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          const __m512i raw = load_pair(q0 + 32 * t, q1 + 32 * t);
          w[t] = _mm512_and_si512(raw, m4);
          w[t + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        }
      } else {
#pragma GCC unroll 8
        for (int s = 0; s < 8; ++s) w[s] = load_pair(q0 + 32 * s, q1 + 32 * s);
      }
      unit(b, w, d, m);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) _mm512_storeu_ps(out + r * kCols, acc[r]);
}

// x8_tile_z<T, rows> for rows = 1 .. R.
template <QuantType T, int R>
X8_TARGET void x8_rows_z(const XBlocks& x, int64_t r0, int64_t rows, const uint8_t* const* g,
                         float* out) {
  if (rows == R) {
    x8_tile_z<T, R>(x, r0, g, out);
  } else if constexpr (R > 1) {
    x8_rows_z<T, R - 1>(x, r0, rows, g, out);
  }
}
#endif

// The widest tile: VNNI 8 rows (16 accumulators and partial sums of 32 registers), AVX2 4.
constexpr int kMaxRows = X8_VNNI ? 8 : 4;

template <QuantType T, int R>
X8_TARGET void x8_rows(const XBlocks& x, int64_t r0, int64_t rows, const uint8_t* const* g,
                       int64_t groups, float* out) {
  if (rows == R) {
    for (int64_t j = 0; j < groups; ++j) x8_tile<T, R, 1>(x, r0, g + j, out + 8 * j);
  } else if constexpr (R > 1) {
    x8_rows<T, R - 1>(x, r0, rows, g, groups, out);
  }
}

template <QuantType T>
X8_TARGET void x8_block(const XBlocks& x, int64_t m, const uint8_t* const* g, int64_t groups,
                        float* out) {
#if X8_VNNI
  if constexpr (kZmmTile<T>) {
    if (groups == 2) {
      for (int64_t r0 = 0; r0 < m; r0 += kMaxRows)
        x8_rows_z<T, kMaxRows>(x, r0, std::min<int64_t>(kMaxRows, m - r0), g, out + r0 * kCols);
      return;
    }
  }
#endif
  if (m == 1 && groups == 2) return x8_tile<T, 1, 2>(x, 0, g, out);
  // Two to four x rows: both groups of the call in one tile (VNNI's registers hold them) as for
  // one row, so each block's unpacking and scales overlap the other group's sums. Not Q6_K (no
  // faster).
  if constexpr (X8_VNNI && T != QuantType::q6_k) {
    if (m == 2 && groups == 2) return x8_tile<T, 2, 2>(x, 0, g, out);
    if (m == 3 && groups == 2) return x8_tile<T, 3, 2>(x, 0, g, out);
    if (m == 4 && groups == 2) return x8_tile<T, 4, 2>(x, 0, g, out);
  }
  for (int64_t r0 = 0; r0 < m; r0 += kMaxRows)
    x8_rows<T, kMaxRows>(x, r0, std::min<int64_t>(kMaxRows, m - r0), g, groups, out + r0 * kCols);
}

X8_TARGET void block_x8_isa(QuantType type, const XBlocks& x, int64_t m, const uint8_t* const* g,
                            int64_t groups, float* out) {
  switch (type) {
    case QuantType::q4_0:
      return x8_block<QuantType::q4_0>(x, m, g, groups, out);
    case QuantType::q4_1:
      return x8_block<QuantType::q4_1>(x, m, g, groups, out);
    case QuantType::q5_0:
      return x8_block<QuantType::q5_0>(x, m, g, groups, out);
    case QuantType::q5_1:
      return x8_block<QuantType::q5_1>(x, m, g, groups, out);
    case QuantType::q8_0:
      return x8_block<QuantType::q8_0>(x, m, g, groups, out);
    case QuantType::q4_k:
      return x8_block<QuantType::q4_k>(x, m, g, groups, out);
    case QuantType::q5_k:
      return x8_block<QuantType::q5_k>(x, m, g, groups, out);
    case QuantType::q6_k:
      return x8_block<QuantType::q6_k>(x, m, g, groups, out);
    case QuantType::q8_a:
      return x8_block<QuantType::q8_a>(x, m, g, groups, out);
    case QuantType::q4_a64:
      return x8_block<QuantType::q4_a64>(x, m, g, groups, out);
    case QuantType::q4_a128:
      return x8_block<QuantType::q4_a128>(x, m, g, groups, out);
    case QuantType::q8_a64:
      return x8_block<QuantType::q8_a64>(x, m, g, groups, out);
    case QuantType::q8_a128:
      return x8_block<QuantType::q8_a128>(x, m, g, groups, out);
    default:
      return;
  }
}

}  // namespace X8_NS
