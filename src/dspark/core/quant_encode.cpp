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

}  // namespace

bool quant_type_encodable(QuantType type) {
  return type == QuantType::q8_0 || type == QuantType::q4_0 || type == QuantType::q4_1 ||
         type == QuantType::q5_0 || type == QuantType::q5_1;
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
    default:
      DSPARK_FAIL(unsupported,
                  "quantizing into {} is not supported (supported: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)",
                  quant_type_name(type));
  }
  const int64_t bytes = quant_block(type).bytes;
  for (int64_t i = 0; i < n_blocks; ++i) encode(x + i * 32, dst + i * bytes);
}

}  // namespace dspark
