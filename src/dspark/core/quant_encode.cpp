#include "dspark/core/quant_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dspark/core/dtype.h"
#include "dspark/core/error.h"

namespace dspark {
namespace {

void put_half(uint8_t* p, float v) {
  const f16 h = f32_to_f16(v);
  std::memcpy(p, &h.bits, 2);
}

float reciprocal(float d) {
  return d == 0.0f ? 0.0f : 1.0f / d;
}

// Two nibbles per byte: element j < 16 low, element j + 16 high (the low 4 bits of each code);
// Q5's fifth bits: bit j of the little-endian u32 qh for element j.
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}
void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}

// Q4_0 / Q5_0 codes of a block: d = -v / offset (v the value of largest magnitude, the first on
// a tie), q = min(2 * offset - 1, trunc(x / d + offset + 0.5)). Returns d.
float symmetric_codes(const float* x, int offset, uint8_t* q) {
  float amax = 0.0f, vmax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  const float d = vmax / static_cast<float>(-offset), id = reciprocal(d);
  const float top = static_cast<float>(2 * offset - 1), shift = static_cast<float>(offset) + 0.5f;
  for (int j = 0; j < 32; ++j)
    q[j] = static_cast<uint8_t>(std::min(top, std::trunc(x[j] * id + shift)));
  return d;
}

// Q4_1 / Q5_1 codes: d = (max - min) / top, m = min, q = min(top, trunc((x - m) / d + 0.5)).
// Returns {d, m}.
std::pair<float, float> min_codes(const float* x, int top, uint8_t* q) {
  const auto [lo, hi] = std::minmax_element(x, x + 32);
  const float min = *lo, d = (*hi - min) / static_cast<float>(top), id = reciprocal(d);
  for (int j = 0; j < 32; ++j)
    q[j] = static_cast<uint8_t>(
        std::min(static_cast<float>(top), std::trunc((x[j] - min) * id + 0.5f)));
  return {d, min};
}

void encode_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = reciprocal(d);
  put_half(b, d);
  for (int j = 0; j < 32; ++j) {
    const auto q = static_cast<int8_t>(std::round(x[j] * id));
    std::memcpy(b + 2 + j, &q, 1);
  }
}

// Q4_0 (kBits 4) / Q5_0 (kBits 5): d, [qh], qs.
template <int kBits>
void encode_symmetric(const float* x, uint8_t* b) {
  uint8_t q[32];
  put_half(b, symmetric_codes(x, 1 << (kBits - 1), q));
  uint8_t* qs = b + 2;
  if constexpr (kBits == 5) {
    pack_fifth_bits(q, qs);
    qs += 4;
  }
  pack_nibbles(q, qs);
}

// Q4_1 (kBits 4) / Q5_1 (kBits 5): d, m, [qh], qs.
template <int kBits>
void encode_with_min(const float* x, uint8_t* b) {
  uint8_t q[32];
  const auto [d, m] = min_codes(x, (1 << kBits) - 1, q);
  put_half(b, d);
  put_half(b + 2, m);
  uint8_t* qs = b + 4;
  if constexpr (kBits == 5) {
    pack_fifth_bits(q, qs);
    qs += 4;
  }
  pack_nibbles(q, qs);
}

// Q4_K (kBits 4) / Q5_K (kBits 5): 8 sub-blocks of 32 values, x = d * sc * q - dmin * m with 6-bit
// sc, m and kBits-bit q. Per sub-block the range [min(lo, 0), hi] is split into 2^kBits - 1 steps
// (scale = range / top, offset = -min(lo, 0)); d and dmin put the largest scale and offset at 63;
// sc, m = round(scale / d, offset / dmin) with the f16-rounded d, dmin; q = round((x + dmin * m) /
// (d * sc)) in 0..top.
template <int kBits>
void encode_k_with_min(const float* x, uint8_t* b) {
  constexpr float kTop = static_cast<float>((1 << kBits) - 1);
  float scale[8], offset[8], max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const auto [lo, hi] = std::minmax_element(x + 32 * j, x + 32 * j + 32);
    const float low = std::min(*lo, 0.0f);
    scale[j] = (std::max(*hi, 0.0f) - low) / kTop;
    offset[j] = -low;
    max_scale = std::max(max_scale, scale[j]);
    max_offset = std::max(max_offset, offset[j]);
  }
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_offset / 63.0f);
  const float d = f16_to_f32(f32_to_f16(max_scale / 63.0f));
  const float dmin = f16_to_f32(f32_to_f16(max_offset / 63.0f));
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(std::clamp(std::round(scale[j] * reciprocal(d)), 0.0f, 63.0f));
    m[j] = static_cast<uint8_t>(std::clamp(std::round(offset[j] * reciprocal(dmin)), 0.0f, 63.0f));
  }
  // The 12 scale bytes (core/quant.cpp's scale_min_k4 reads them back).
  uint8_t* packed = b + 4;
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
  // Codes: 64 values per 32 bytes, sub-block 2g in the low nibbles, 2g + 1 in the high ones; Q5_K's
  // fifth bits before them, bit j of qh[l] for value l of sub-block j.
  uint8_t* qh = b + 16;
  uint8_t* qs = kBits == 5 ? b + 48 : b + 16;
  if constexpr (kBits == 5) std::memset(qh, 0, 32);
  for (int j = 0; j < 8; ++j) {
    const float step = d * static_cast<float>(sc[j]), id = reciprocal(step);
    const float shift = dmin * static_cast<float>(m[j]);
    for (int l = 0; l < 32; ++l) {
      const auto q =
          static_cast<uint8_t>(std::clamp(std::round((x[32 * j + l] + shift) * id), 0.0f, kTop));
      uint8_t& byte = qs[32 * (j / 2) + l];
      byte = j % 2 == 0 ? static_cast<uint8_t>(q & 0x0F)
                        : static_cast<uint8_t>(byte | ((q & 0x0F) << 4));
      if constexpr (kBits == 5) qh[l] = static_cast<uint8_t>(qh[l] | ((q >> 4) << j));
    }
  }
}

// Q6_K: 16 sub-blocks of 16 values, x = d * sc * (q - 32) with int8 sc and 6-bit q. Per
// sub-block the value of largest magnitude v gets code 0 (scale = v / -32, as Q4_0 does); d puts
// the largest |scale| at 127; sc = round(scale / d) with the f16-rounded d; q - 32 = round(x /
// (d * sc)) in -32..31.
void encode_q6_k(const float* x, uint8_t* b) {
  float scale[16], max_abs = 0.0f;
  for (int i = 0; i < 16; ++i) {
    float amax = 0.0f, v = 0.0f;
    for (int l = 0; l < 16; ++l) {
      if (std::fabs(x[16 * i + l]) > amax) {
        amax = std::fabs(x[16 * i + l]);
        v = x[16 * i + l];
      }
    }
    scale[i] = v / -32.0f;
    max_abs = std::max(max_abs, amax / 32.0f);
  }
  put_half(b + 208, max_abs / 127.0f);
  const float d = f16_to_f32(f32_to_f16(max_abs / 127.0f));
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  uint8_t q[256];
  for (int i = 0; i < 16; ++i) {
    sc[i] = static_cast<int8_t>(std::clamp(std::round(scale[i] * reciprocal(d)), -128.0f, 127.0f));
    const float id = reciprocal(d * static_cast<float>(sc[i]));
    for (int l = 0; l < 16; ++l) {
      q[16 * i + l] =
          static_cast<uint8_t>(std::clamp(std::round(x[16 * i + l] * id), -32.0f, 31.0f) + 32.0f);
    }
  }
  // Per half of 128 values: ql[64] low 4 bits (value l and l + 64 share byte l, values l + 32
  // and l + 96 byte l + 32), qh[32] the top 2 bits of values l, l + 32, l + 64, l + 96.
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = b + 64 * h;
    uint8_t* qh = b + 128 + 32 * h;
    const uint8_t* v = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((v[l] & 0x0F) | ((v[l + 64] & 0x0F) << 4));
      ql[l + 32] = static_cast<uint8_t>((v[l + 32] & 0x0F) | ((v[l + 96] & 0x0F) << 4));
      qh[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                   ((v[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

bool quant_type_encodable(QuantType type) {
  return type == QuantType::q8_0 || type == QuantType::q4_0 || type == QuantType::q4_1 ||
         type == QuantType::q5_0 || type == QuantType::q5_1 || type == QuantType::q4_k ||
         type == QuantType::q5_k || type == QuantType::q6_k;
}

void quantize_blocks(QuantType type, const float* x, int64_t n_blocks, uint8_t* dst) {
  void (*encode)(const float*, uint8_t*) = nullptr;
  switch (type) {
    case QuantType::q8_0:
      encode = encode_q8_0;
      break;
    case QuantType::q4_0:
      encode = encode_symmetric<4>;
      break;
    case QuantType::q4_1:
      encode = encode_with_min<4>;
      break;
    case QuantType::q5_0:
      encode = encode_symmetric<5>;
      break;
    case QuantType::q5_1:
      encode = encode_with_min<5>;
      break;
    case QuantType::q4_k:
      encode = encode_k_with_min<4>;
      break;
    case QuantType::q5_k:
      encode = encode_k_with_min<5>;
      break;
    case QuantType::q6_k:
      encode = encode_q6_k;
      break;
    default:
      DSPARK_FAIL(unsupported,
                  "quantizing into {} is not supported (supported: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                  "Q4_K, Q5_K, Q6_K)",
                  quant_type_name(type));
  }
  const QuantBlock block = quant_block(type);
  for (int64_t i = 0; i < n_blocks; ++i) encode(x + i * block.elements, dst + i * block.bytes);
}

}  // namespace dspark
