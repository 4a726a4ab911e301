// The reference dequantization of the block formats (core/quant.h): the arithmetic in f32 in the
// order of the gguf package's, so results are bit-identical to it (Q8_A and the MLX group types:
// MLX's scale * q + bias, one product and one sum in f32).
#include "dspark/core/quant.h"

#include <cctype>
#include <cstring>
#include <string>

#include "dspark/core/dtype.h"
#include "dspark/core/error.h"

namespace dspark {
namespace {

float half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(f16{bits});
}

void block_q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// 32 values d * q + m from Q4_1's 16 bytes of nibbles (value j low, j + 16 high); affine_bytes:
// from Q8_A's 32 bytes.
void affine_nibbles(float d, float m, const uint8_t* qs, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

void affine_bytes(float d, float m, const uint8_t* qs, float* y) {
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(qs[j]) + m;
}

void block_q4_1(const uint8_t* b, float* y) {
  affine_nibbles(half(b), half(b + 2), b + 4, y);
}

// The fifth bits of a Q5 block: bit j of the little-endian u32 at `p` belongs to element j.
uint32_t high_bits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  return qh;
}

void block_q5_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint32_t qh = high_bits(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

void block_q5_1(const uint8_t* b, float* y) {
  const float d = half(b);
  const float m = half(b + 2);
  const uint32_t qh = high_bits(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + 16] = d * static_cast<float>(hi) + m;
  }
}

void block_q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]);
}

void block_q8_a(const uint8_t* b, float* y) {
  affine_bytes(half(b), half(b + 2), b + 4, y);
}

// Q4_A64 ... Q8_A128: kUnits units of 32 values sharing the group's d and m.
template <int kUnits, bool kNibbles>
void block_group(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  for (int u = 0; u < kUnits; ++u) {
    if constexpr (kNibbles) {
      affine_nibbles(d, m, b + 4 + 16 * u, y + 32 * u);
    } else {
      affine_bytes(d, m, b + 4 + 32 * u, y + 32 * u);
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) packed in the 12 bytes of a K-quant block: bytes
// 0-3 hold scales 0-3 (low 6 bits), 4-7 mins 0-3; bytes 8-11 hold the low 4 bits of scale/min
// 4-7, whose top 2 bits are the top bits of bytes 0-3 / 4-7.
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void block_q4_k(const uint8_t* b, float* y) {
  const float d = half(b);
  const float dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int g = 0; g < 4; ++g) {  // groups of 64 values
    uint8_t sc, m;
    scale_min_k4(2 * g, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(2 * g + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    y += 64;
  }
}

void block_q5_k(const uint8_t* b, float* y) {
  const float d = half(b);
  const float dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int g = 0; g < 4; ++g) {
    uint8_t sc, m;
    scale_min_k4(2 * g, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(2 * g + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    const int u1 = 1 << (2 * g), u2 = 2 << (2 * g);
    for (int l = 0; l < 32; ++l)
      y[l] = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      y[l + 32] = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    y += 64;
  }
}

void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int half_block = 0; half_block < 2; ++half_block) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(QuantType type) {
  switch (type) {
    case QuantType::q4_0:
      return &block_q4_0;
    case QuantType::q4_1:
      return &block_q4_1;
    case QuantType::q5_0:
      return &block_q5_0;
    case QuantType::q5_1:
      return &block_q5_1;
    case QuantType::q8_0:
      return &block_q8_0;
    case QuantType::q4_k:
      return &block_q4_k;
    case QuantType::q5_k:
      return &block_q5_k;
    case QuantType::q6_k:
      return &block_q6_k;
    case QuantType::q8_a:
      return &block_q8_a;
    case QuantType::q4_a64:
      return &block_group<2, true>;
    case QuantType::q4_a128:
      return &block_group<4, true>;
    case QuantType::q8_a64:
      return &block_group<2, false>;
    case QuantType::q8_a128:
      return &block_group<4, false>;
  }
  DSPARK_FAIL(internal, "unknown quant type {}", static_cast<int>(type));
}

}  // namespace

QuantBlock quant_block(QuantType type) {
  switch (type) {
    case QuantType::q4_0:
      return {32, 18};
    case QuantType::q4_1:
      return {32, 20};
    case QuantType::q5_0:
      return {32, 22};
    case QuantType::q5_1:
      return {32, 24};
    case QuantType::q8_0:
      return {32, 34};
    case QuantType::q4_k:
      return {256, 144};
    case QuantType::q5_k:
      return {256, 176};
    case QuantType::q6_k:
      return {256, 210};
    case QuantType::q8_a:
      return {32, 36};
    case QuantType::q4_a64:
      return {64, 36};
    case QuantType::q4_a128:
      return {128, 68};
    case QuantType::q8_a64:
      return {64, 68};
    case QuantType::q8_a128:
      return {128, 132};
  }
  DSPARK_FAIL(internal, "unknown quant type {}", static_cast<int>(type));
}

std::string_view quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::q4_0:
      return "Q4_0";
    case QuantType::q4_1:
      return "Q4_1";
    case QuantType::q5_0:
      return "Q5_0";
    case QuantType::q5_1:
      return "Q5_1";
    case QuantType::q8_0:
      return "Q8_0";
    case QuantType::q4_k:
      return "Q4_K";
    case QuantType::q5_k:
      return "Q5_K";
    case QuantType::q6_k:
      return "Q6_K";
    case QuantType::q8_a:
      return "Q8_A";
    case QuantType::q4_a64:
      return "Q4_A64";
    case QuantType::q4_a128:
      return "Q4_A128";
    case QuantType::q8_a64:
      return "Q8_A64";
    case QuantType::q8_a128:
      return "Q8_A128";
  }
  return "Q?";
}

std::optional<QuantType> quant_type_from_name(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (QuantType t : kQuantTypes)
    if (quant_type_name(t) == upper) return t;
  for (QuantType t : kGroupQuantTypes)
    if (quant_type_name(t) == upper) return t;
  return std::nullopt;
}

int64_t quant_row_bytes(QuantType type, int64_t k) {
  const QuantBlock b = quant_block(type);
  DSPARK_CHECK_KIND(invalid_input, k >= 0 && k % b.elements == 0,
                    "a {} row of {} values: the length must be a multiple of {}",
                    quant_type_name(type), k, b.elements);
  return k / b.elements * b.bytes;
}

QuantType quant_unit_type(QuantType type) {
  switch (type) {
    case QuantType::q4_a64:
    case QuantType::q4_a128:
      return QuantType::q4_1;
    case QuantType::q8_a64:
    case QuantType::q8_a128:
      return QuantType::q8_a;
    default:
      return type;
  }
}

void expand_quant_groups(QuantType type, const uint8_t* src, int64_t n_blocks, uint8_t* dst) {
  const QuantType unit = quant_unit_type(type);
  const QuantBlock b = quant_block(type), ub = quant_block(unit);
  if (unit == type) {
    std::memcpy(dst, src, static_cast<size_t>(n_blocks * b.bytes));
    return;
  }
  // The group's f16 d and m (4 bytes), then each unit's codes: ub.bytes - 4 of them.
  const int64_t units = b.elements / ub.elements, codes = ub.bytes - 4;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* g = src + i * b.bytes;
    for (int64_t u = 0; u < units; ++u) {
      uint8_t* o = dst + (i * units + u) * ub.bytes;
      std::memcpy(o, g, 4);
      std::memcpy(o + 4, g + 4 + u * codes, static_cast<size_t>(codes));
    }
  }
}

void dequantize_blocks(QuantType type, const uint8_t* src, int64_t n_blocks, float* dst) {
  const BlockFn fn = block_fn(type);
  const QuantBlock b = quant_block(type);
  for (int64_t i = 0; i < n_blocks; ++i) fn(src + i * b.bytes, dst + i * b.elements);
}

}  // namespace dspark
