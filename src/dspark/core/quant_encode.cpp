#include "dspark/core/quant_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "dspark/core/dtype.h"
#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"

namespace dspark {
namespace {

void put_half(uint8_t* p, float v) {
  const f16 h = f32_to_f16(v);
  std::memcpy(p, &h.bits, 2);
}

float reciprocal(float d) {
  return d == 0.0f ? 0.0f : 1.0f / d;
}

// Q4_K / Q5_K's scale search starts from a sub-block's whole range split into top steps and from
// the range split into top + 1 steps centred on it (its extremes clipped by half a step), then
// takes two more steps from the best; more starting points lowered the error by less than 0.2%
// (search_affine).
constexpr float kRangeClips[] = {0.0f, 1.0f};

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

// The value of largest magnitude among n (the first on a tie; 0 when all are 0).
float largest_magnitude(const float* x, int n) {
  float amax = 0.0f, v = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      v = x[j];
    }
  }
  return v;
}

// Q4_0 / Q5_0 codes of a block: d = -v / offset (v the value of largest magnitude, the first on
// a tie), q = min(2 * offset - 1, trunc(x / d + offset + 0.5)). Returns d.
float symmetric_codes(const float* x, int offset, uint8_t* q) {
  const float d = largest_magnitude(x, 32) / static_cast<float>(-offset), id = reciprocal(d);
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

// The k-quants' scale search. A sub-block's values x are written as a * q + b (Q4_K / Q5_K, b <= 0
// and codes 0..top) or s * q (Q6_K, codes -32..31). For given codes, the best a and b (or s) in
// squared error are a least-squares fit; for a given a and b the best codes are the rounded ones.
// Each starting point is rounded, fitted and rounded again, and the one with the least error is
// refined by more such steps; no step increases the error, and the plain range rule is the first
// starting point, so no sub-block errs more than under that rule. The sub-block scales are then
// put on the block's 6-bit (or int8) grid, rounded down or up, whichever gives the smaller error
// with the codes rounded again. The error is unweighted: without activation statistics every
// weight of a row counts alike in a product's error.

// Codes 0..top of x for x ~ a * q + b, as floats.
void round_affine(const float* x, int n, float a, float b, float top, float* q) {
  const float ia = reciprocal(a);
  for (int l = 0; l < n; ++l)  // halves up (the search's rounding: a truncation, no libm call)
    q[l] = static_cast<float>(static_cast<int>(std::clamp((x[l] - b) * ia, 0.0f, top) + 0.5f));
}

// The sum of term(l) over l < n (a multiple of 8) as 8 interleaved partial sums, which the
// compiler keeps in vector registers (one running sum would be a serial chain of adds).
template <typename Term>
float lane_sum(int n, Term term) {
  float part[8] = {};
  for (int l = 0; l < n; l += 8)
    for (int i = 0; i < 8; ++i) part[i] += term(l + i);
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

float affine_error(const float* x, int n, float a, float b, const float* q) {
  return lane_sum(n, [&](int l) {
    const float r = a * q[l] + b - x[l];
    return r * r;
  });
}

// The least-squares a >= 0, b <= 0 of x ~ a * q + b for fixed codes.
std::pair<float, float> fit_affine(const float* x, int n, const float* q) {
  const float sq = lane_sum(n, [&](int l) { return q[l]; });
  const float sqq = lane_sum(n, [&](int l) { return q[l] * q[l]; });
  const float sx = lane_sum(n, [&](int l) { return x[l]; });
  const float sqx = lane_sum(n, [&](int l) { return q[l] * x[l]; });
  const float det = static_cast<float>(n) * sqq - sq * sq, mean = sx / static_cast<float>(n);
  float b = std::min(mean, 0.0f), a = q[0] > 0.0f ? (mean - b) / q[0] : 0.0f;  // codes all equal
  if (det > 0) {
    a = (static_cast<float>(n) * sqx - sq * sx) / det;
    b = (sqq * sx - sq * sqx) / det;
    if (b > 0) {  // the constrained optimum lies on b = 0
      b = 0;
      a = sqx / sqq;
    }
  }
  return {std::max(a, 0.0f), b};
}

// The (a, b) of one sub-block of n values with codes 0..top (see above).
std::pair<float, float> search_affine(const float* x, int n, float top) {
  const auto [lo_at, hi_at] = std::minmax_element(x, x + n);
  const float lo = std::min(*lo_at, 0.0f), hi = std::max(*hi_at, 0.0f);
  if (!(hi > lo)) return {0.0f, 0.0f};
  float q[32];
  float best_error = std::numeric_limits<float>::infinity(), best_a = 0.0f, best_b = 0.0f;
  auto keep = [&](float a, float b) {  // (a, b) with its rounded codes, if better
    round_affine(x, n, a, b, top, q);
    const float e = affine_error(x, n, a, b, q);
    if (e < best_error) {
      best_error = e;
      best_a = a;
      best_b = b;
    }
  };
  auto step = [&](float a, float b) {  // round, fit, round
    keep(a, b);
    const auto [fa, fb] = fit_affine(x, n, q);
    keep(fa, fb);
  };
  for (const float clip : kRangeClips) {
    const float a = (hi - lo) / (top + clip);
    step(a, std::min(lo + 0.5f * clip * a, 0.0f));
  }
  for (int i = 0; i < 2; ++i) step(best_a, best_b);
  return {best_a, best_b};
}

// Q4_K (kBits 4) / Q5_K (kBits 5): 8 sub-blocks of 32 values, x = d * sc * q - dmin * m with 6-bit
// sc, m and kBits-bit q. Each sub-block's a = d * sc and b = -dmin * m come from search_affine; d
// and dmin (f16) put the largest a and -b at 63; sc and m are a / d and -b / dmin rounded down or
// up, whichever pair gives the smaller error; q = round((x + dmin * m) / (d * sc)) in 0..top.
template <int kBits>
void encode_k_with_min(const float* x, uint8_t* b) {
  constexpr float kTop = static_cast<float>((1 << kBits) - 1);
  float scale[8], offset[8], max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const auto [a, lo] = search_affine(x + 32 * j, 32, kTop);
    scale[j] = a;
    offset[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_offset = std::max(max_offset, offset[j]);
  }
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_offset / 63.0f);
  const float d = f16_to_f32(f32_to_f16(max_scale / 63.0f));
  const float dmin = f16_to_f32(f32_to_f16(max_offset / 63.0f));
  // Zeros stand where no candidate's error compares (NaN values: the block is then zeros).
  uint8_t sc[8] = {}, m[8] = {}, q[256] = {};
  float trial[32];
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    const float s = scale[j] * reciprocal(d), o = offset[j] * reciprocal(dmin);
    float best = std::numeric_limits<float>::infinity();
    for (const float si : {std::floor(s), std::ceil(s)}) {
      for (const float oi : {std::floor(o), std::ceil(o)}) {
        const float cs = std::clamp(si, 0.0f, 63.0f), co = std::clamp(oi, 0.0f, 63.0f);
        const float a = d * cs, lo = -dmin * co;
        round_affine(xj, 32, a, lo, kTop, trial);
        const float e = affine_error(xj, 32, a, lo, trial);
        if (e < best) {
          best = e;
          sc[j] = static_cast<uint8_t>(cs);
          m[j] = static_cast<uint8_t>(co);
          for (int l = 0; l < 32; ++l) q[32 * j + l] = static_cast<uint8_t>(trial[l]);
        }
      }
    }
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
    for (int l = 0; l < 32; ++l) {
      const uint8_t c = q[32 * j + l];
      uint8_t& byte = qs[32 * (j / 2) + l];
      byte = j % 2 == 0 ? static_cast<uint8_t>(c & 0x0F)
                        : static_cast<uint8_t>(byte | ((c & 0x0F) << 4));
      if constexpr (kBits == 5) qh[l] = static_cast<uint8_t>(qh[l] | ((c >> 4) << j));
    }
  }
}

// Codes -32..31 of x for x ~ s * q, as floats.
void round_symmetric(const float* x, int n, float s, float* q) {
  const float is = reciprocal(s);
  for (int l = 0; l < n; ++l)  // halves up, as round_affine
    q[l] = static_cast<float>(static_cast<int>(std::clamp(x[l] * is + 32.0f, 0.0f, 63.0f) + 0.5f)) -
           32.0f;
}

float symmetric_error(const float* x, int n, float s, const float* q) {
  return lane_sum(n, [&](int l) {
    const float r = s * q[l] - x[l];
    return r * r;
  });
}

// The s of one Q6_K sub-block of 16 values: from the value of largest magnitude v at code -32 (as
// Q4_0 does) and at 31, then one more step from the best (narrower starting ranges and more steps
// lowered the error by less than 0.2% at about 1.6x the time).
float search_symmetric(const float* x) {
  const float v = largest_magnitude(x, 16);
  if (v == 0.0f) return 0.0f;
  float q[16];
  float best_error = std::numeric_limits<float>::infinity(), best = 0.0f;
  auto keep = [&](float s) {  // s with its rounded codes, if better
    round_symmetric(x, 16, s, q);
    const float e = symmetric_error(x, 16, s, q);
    if (e < best_error) {
      best_error = e;
      best = s;
    }
  };
  auto step = [&](float s) {  // round, fit, round
    keep(s);
    const float sqx = lane_sum(16, [&](int l) { return q[l] * x[l]; });
    const float sqq = lane_sum(16, [&](int l) { return q[l] * q[l]; });
    if (sqq > 0) keep(sqx / sqq);
  };
  step(v / -32.0f);
  step(v / 31.0f);
  step(best);
  return best;
}

// Q6_K: 16 sub-blocks of 16 values, x = d * sc * (q - 32) with int8 sc and 6-bit q. Each
// sub-block's s = d * sc comes from search_symmetric; d (f16) puts the largest |s| at 127; sc is
// s / d rounded down or up, whichever gives the smaller error; q - 32 = round(x / (d * sc)) in
// -32..31.
void encode_q6_k(const float* x, uint8_t* b) {
  float scale[16], max_abs = 0.0f;
  for (int i = 0; i < 16; ++i) {
    scale[i] = search_symmetric(x + 16 * i);
    max_abs = std::max(max_abs, std::fabs(scale[i]));
  }
  put_half(b + 208, max_abs / 127.0f);
  const float d = f16_to_f32(f32_to_f16(max_abs / 127.0f));
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  uint8_t q[256];
  std::fill(q, q + 256, uint8_t{32});  // code 0 where no candidate's error compares (NaN values)
  std::fill(sc, sc + 16, int8_t{0});
  for (int i = 0; i < 16; ++i) {
    const float* xi = x + 16 * i;
    const float s = scale[i] * reciprocal(d);
    float best = std::numeric_limits<float>::infinity();
    float trial[16];
    for (const float si : {std::floor(s), std::ceil(s)}) {
      const float c = std::clamp(si, -128.0f, 127.0f);
      round_symmetric(xi, 16, d * c, trial);
      const float e = symmetric_error(xi, 16, d * c, trial);
      if (e < best) {
        best = e;
        sc[i] = static_cast<int8_t>(c);
        for (int l = 0; l < 16; ++l) q[16 * i + l] = static_cast<uint8_t>(trial[l] + 32.0f);
      }
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
  // Blocks are independent: the pool's threads take runs of about 64k values each.
  ThreadPool::global().parallel_for(n_blocks, std::max<int64_t>(1, 65536 / block.elements),
                                    [&](int64_t begin, int64_t end) {
                                      for (int64_t i = begin; i < end; ++i)
                                        encode(x + i * block.elements, dst + i * block.bytes);
                                    });
}

}  // namespace dspark
