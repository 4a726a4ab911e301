// The interleaved layout of quant_pack.h: byte moves (Q8_0's +128; Q8_A and the MLX group types as
// stored; Q5_0 / Q5_1's fifth bits by step; Q4_K / Q5_K's 6-bit scales and mins regrouped; Q6_K's
// int8 scales by sub-block).
#include "dspark/backend/cpu/kernels/quant_pack.h"

#include <cstring>

#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

// Where a block's parts lie: the f16 scales (d at 0, m at 2 when there is one), Q5's 32 fifth
// bits, the quants.
struct Parts {
  int halves;   // f16 scales per block (1 or 2)
  bool fifth;   // a u32 of fifth bits after the scales (Q5_0, Q5_1)
  int quants;   // bytes of quants per block (16 or 32; the MLX group types' 32 to 128)
  bool offset;  // values stored + 128 (Q8_0)
};

Parts parts_of(QuantType t) {
  switch (t) {
    case QuantType::q4_0:
      return {1, false, 16, false};
    case QuantType::q4_1:
      return {2, false, 16, false};
    case QuantType::q5_0:
      return {1, true, 16, false};
    case QuantType::q5_1:
      return {2, true, 16, false};
    case QuantType::q8_0:
      return {1, false, 32, true};
    case QuantType::q8_a:  // and MLX's groups: f16 d, m, then the codes as stored
    case QuantType::q4_a64:
    case QuantType::q4_a128:
    case QuantType::q8_a64:
    case QuantType::q8_a128:
      return {2, false, static_cast<int>(quant_block(t).bytes) - 4, false};
    default:
      break;
  }
  DSPARK_FAIL(unsupported, "quant_pack: {} has no interleaved layout", quant_type_name(t));
}

// Q5_0 / Q5_1: a row's u32 of fifth bits (bit j: value j) as its 4 bytes of the group block, bit s
// of byte i = bit 4s + i of the u32 (the bit of step s's value 4s + i), and back.
void q5_put_bits(const uint8_t* qh, uint8_t out[4]) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  for (int i = 0; i < 4; ++i) {
    uint8_t b = 0;
    for (int s = 0; s < 8; ++s) b = static_cast<uint8_t>(b | (((v >> (4 * s + i)) & 1u) << s));
    out[i] = b;
  }
}

void q5_get_bits(const uint8_t in[4], uint8_t* qh) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    for (int s = 0; s < 8; ++s) v |= static_cast<uint32_t>((in[i] >> s) & 1) << (4 * s + i);
  std::memcpy(qh, &v, 4);
}

// Q4_K: the super-block's 12 bytes of 6-bit scales sc[8] and mins m[8] (core/quant.h) and back.
void k4_unpack_scales(const uint8_t* q, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((q[j + 8] & 0x0F) | ((q[j] >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
  }
}

void k4_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

// Q4_K / Q5_K group super-blocks (quant_pack.h): one row's super-block (plain, 144 / 176 bytes at
// src, or null: zeros) into / out of row r of the group super-block at gb (1,152 / 1,408 bytes).
// Q5_K's qs follow its 32 bytes of qh.
void k4_put(const uint8_t* src, int r, uint8_t* gb, bool five) {
  const int qs = five ? 48 : 16;
  uint8_t sc[8] = {}, m[8] = {};
  if (src) k4_unpack_scales(src + 4, sc, m);
  for (int h = 0; h < 2; ++h) {
    uint8_t* o = gb + 16 * h + 2 * r;
    o[0] = src ? src[2 * h] : 0;
    o[1] = src ? src[2 * h + 1] : 0;
  }
  for (int u = 0; u < 4; ++u) {
    const int at = 8 * u + r;
    gb[32 + at] = static_cast<uint8_t>((sc[u] & 0x0F) | ((sc[u + 4] & 0x0F) << 4));
    gb[64 + at] = static_cast<uint8_t>((m[u] & 0x0F) | ((m[u + 4] & 0x0F) << 4));
    gb[96 + at] = static_cast<uint8_t>((sc[u] >> 4) | ((sc[u + 4] >> 4) << 2) | ((m[u] >> 4) << 4) |
                                       ((m[u + 4] >> 4) << 6));
  }
  for (int p = 0; p < 4; ++p)
    for (int t = 0; t < 8; ++t)
      for (int i = 0; i < 4; ++i)
        gb[128 + 256 * p + 32 * t + 4 * r + i] = src ? src[qs + 32 * p + 4 * t + i] : 0;
  if (five)
    for (int c = 0; c < 8; ++c)
      for (int i = 0; i < 4; ++i) gb[1152 + 32 * c + 4 * r + i] = src ? src[16 + 4 * c + i] : 0;
}

void k4_get(const uint8_t* gb, int r, uint8_t* dst, bool five) {
  const int qs = five ? 48 : 16;
  uint8_t sc[8], m[8];
  for (int h = 0; h < 2; ++h) std::memcpy(dst + 2 * h, gb + 16 * h + 2 * r, 2);
  for (int u = 0; u < 4; ++u) {
    const int at = 8 * u + r;
    const uint8_t hi = gb[96 + at];
    sc[u] = static_cast<uint8_t>((gb[32 + at] & 0x0F) | ((hi & 3) << 4));
    sc[u + 4] = static_cast<uint8_t>((gb[32 + at] >> 4) | (((hi >> 2) & 3) << 4));
    m[u] = static_cast<uint8_t>((gb[64 + at] & 0x0F) | (((hi >> 4) & 3) << 4));
    m[u + 4] = static_cast<uint8_t>((gb[64 + at] >> 4) | ((hi >> 6) << 4));
  }
  k4_pack_scales(sc, m, dst + 4);
  for (int p = 0; p < 4; ++p)
    for (int t = 0; t < 8; ++t)
      for (int i = 0; i < 4; ++i)
        dst[qs + 32 * p + 4 * t + i] = gb[128 + 256 * p + 32 * t + 4 * r + i];
  if (five)
    for (int c = 0; c < 8; ++c)
      for (int i = 0; i < 4; ++i) dst[16 + 4 * c + i] = gb[1152 + 32 * c + 4 * r + i];
}

// Q6_K group super-blocks (quant_pack.h): one row's super-block (plain, 210 bytes at src, or null:
// zeros) into / out of row r of the group super-block at gb (1,680 bytes).
void k6_put(const uint8_t* src, int r, uint8_t* gb) {
  gb[2 * r] = src ? src[208] : 0;
  gb[2 * r + 1] = src ? src[209] : 0;
  for (int i = 0; i < 16; ++i) gb[16 + 8 * i + r] = src ? src[192 + i] : 0;
  for (int c = 0; c < 48; ++c)  // 32 chunks of ql, then 16 of qh: 4 bytes each
    for (int i = 0; i < 4; ++i) gb[144 + 32 * c + 4 * r + i] = src ? src[4 * c + i] : 0;
}

void k6_get(const uint8_t* gb, int r, uint8_t* dst) {
  dst[208] = gb[2 * r];
  dst[209] = gb[2 * r + 1];
  for (int i = 0; i < 16; ++i) dst[192 + i] = gb[16 + 8 * i + r];
  for (int c = 0; c < 48; ++c)
    for (int i = 0; i < 4; ++i) dst[4 * c + i] = gb[144 + 32 * c + 4 * r + i];
}

}  // namespace

void pack_group_x8(QuantType t, const uint8_t* const rows[8], int64_t k, uint8_t* dst) {
  if (t == QuantType::q4_k || t == QuantType::q5_k) {
    const bool five = t == QuantType::q5_k;
    const int64_t bytes = five ? 176 : 144;
    for (int64_t b = 0; b < k / 256; ++b)
      for (int r = 0; r < 8; ++r)
        k4_put(rows[r] ? rows[r] + bytes * b : nullptr, r, dst + 8 * bytes * b, five);
    return;
  }
  if (t == QuantType::q6_k) {
    for (int64_t b = 0; b < k / 256; ++b)
      for (int r = 0; r < 8; ++r) k6_put(rows[r] ? rows[r] + 210 * b : nullptr, r, dst + 1680 * b);
    return;
  }
  const Parts p = parts_of(t);
  const QuantBlock qb = quant_block(t);
  const int64_t nb = k / qb.elements;
  const int scales = 2 * p.halves, head = scales + (p.fifth ? 4 : 0);
  const uint8_t flip = p.offset ? 0x80 : 0;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = dst + b * 8 * qb.bytes;
    for (int r = 0; r < 8; ++r) {
      const uint8_t* src = rows[r] ? rows[r] + b * qb.bytes : nullptr;
      for (int h = 0; h < p.halves; ++h) {
        uint8_t* o = out + 16 * h + 2 * r;
        if (src) {
          std::memcpy(o, src + 2 * h, 2);
        } else {
          o[0] = o[1] = 0;
        }
      }
      if (p.fifth) {
        uint8_t* o = out + 8 * scales + 4 * r;
        if (src) {
          q5_put_bits(src + scales, o);
        } else {
          std::memset(o, 0, 4);
        }
      }
      for (int c = 0; c < p.quants / 4; ++c)
        for (int i = 0; i < 4; ++i)
          out[8 * head + 32 * c + 4 * r + i] =
              src ? static_cast<uint8_t>(src[head + 4 * c + i] ^ flip) : flip;
    }
  }
}

void pack_rows_x8(QuantType t, const uint8_t* src, int64_t n, int64_t k, uint8_t* dst) {
  const int64_t row_bytes = quant_row_bytes(t, k);
  const int64_t groups = n / 8;
  ThreadPool::global().parallel_for(groups, 64, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* rows[8];
      for (int r = 0; r < 8; ++r) rows[r] = src + (8 * g + r) * row_bytes;
      pack_group_x8(t, rows, k, dst + 8 * g * row_bytes);
    }
  });
  const int64_t done = 8 * groups * row_bytes;
  std::memcpy(dst + done, src + done, static_cast<size_t>((n - 8 * groups) * row_bytes));
}

void unpack_row_x8(QuantType t, const uint8_t* packed, int64_t n, int64_t k, int64_t row,
                   uint8_t* dst) {
  const int64_t row_bytes = quant_row_bytes(t, k);
  if (row >= n / 8 * 8) {
    std::memcpy(dst, packed + row * row_bytes, static_cast<size_t>(row_bytes));
    return;
  }
  const uint8_t* group = packed + row / 8 * 8 * row_bytes;
  const int r = static_cast<int>(row % 8);
  if (t == QuantType::q4_k || t == QuantType::q5_k) {
    const bool five = t == QuantType::q5_k;
    const int64_t bytes = five ? 176 : 144;
    for (int64_t b = 0; b < k / 256; ++b) k4_get(group + 8 * bytes * b, r, dst + bytes * b, five);
    return;
  }
  if (t == QuantType::q6_k) {
    for (int64_t b = 0; b < k / 256; ++b) k6_get(group + 1680 * b, r, dst + 210 * b);
    return;
  }
  const Parts p = parts_of(t);
  const QuantBlock qb = quant_block(t);
  const int64_t nb = k / qb.elements;
  const int scales = 2 * p.halves, head = scales + (p.fifth ? 4 : 0);
  const uint8_t flip = p.offset ? 0x80 : 0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* in = group + b * 8 * qb.bytes;
    uint8_t* out = dst + b * qb.bytes;
    for (int h = 0; h < p.halves; ++h) std::memcpy(out + 2 * h, in + 16 * h + 2 * r, 2);
    if (p.fifth) q5_get_bits(in + 8 * scales + 4 * r, out + scales);
    for (int c = 0; c < p.quants / 4; ++c)
      for (int i = 0; i < 4; ++i)
        out[head + 4 * c + i] = static_cast<uint8_t>(in[8 * head + 32 * c + 4 * r + i] ^ flip);
  }
}

}  // namespace dspark::cpu
