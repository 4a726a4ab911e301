// GGUF tensor types -> f32, written from the block formats' definitions:
//   F32 / F16 / BF16   plain little-endian floats
//   Q8_0  (32 values)  f16 d, i8 q[32]                         x = d * q
//   Q4_0  (32 values)  f16 d, u8 qs[16]                        x = d * (nibble - 8)
//   Q4_1  (32 values)  f16 d, f16 m, u8 qs[16]                 x = d * nibble + m
//         (nibbles: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble)
//   Q4_K  (256 values) f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//   Q5_K  (256 values) f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//         (8 sub-blocks of 32 with 6-bit scale sc and min m: x = d*sc * q - dmin*m; each group of
//          64 values takes 32 bytes of qs, low nibbles first; Q5_K's fifth bit of value l of
//          sub-block s is bit s of qh[l])
//   Q6_K  (256 values) u8 ql[128], u8 qh[64], i8 scales[16], f16 d
//         (x = d * scales[sub] * (6-bit q - 32); two halves of 128, each reading 64 bytes of ql
//          and 32 of qh)
// The arithmetic is done in f32 in the same order as the reference implementations, so results
// are bit-identical to them.
#include <cstring>

#include "dspark/core/dtype.h"
#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"
#include "dspark/io/gguf.h"

namespace dspark {
namespace {

float half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(f16{bits});
}

void block_q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d;
}

void block_q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void block_q4_1(const uint8_t* b, float* y) {
  const float d = half(b);
  const float m = half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
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
    for (int l = 0; l < 32; ++l) {
      y[l] = d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      y[l + 32] = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
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

void element_f32(const uint8_t* b, float* y) {
  std::memcpy(y, b, 4);
}
void element_f16(const uint8_t* b, float* y) {
  *y = half(b);
}
void element_bf16(const uint8_t* b, float* y) {
  uint16_t bits;
  std::memcpy(&bits, b, 2);
  *y = bf16_to_f32(bf16{bits});
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return &element_f32;
    case GgmlType::f16:
      return &element_f16;
    case GgmlType::bf16:
      return &element_bf16;
    case GgmlType::q8_0:
      return &block_q8_0;
    case GgmlType::q4_0:
      return &block_q4_0;
    case GgmlType::q4_1:
      return &block_q4_1;
    case GgmlType::q4_k:
      return &block_q4_k;
    case GgmlType::q5_k:
      return &block_q5_k;
    case GgmlType::q6_k:
      return &block_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

bool ggml_type_dequantizable(GgmlType type) {
  return block_fn(type) != nullptr;
}

void dequantize_to_f32(GgmlType type, const uint8_t* src, int64_t n, float* dst,
                       const std::string& what) {
  const BlockFn fn = block_fn(type);
  DSPARK_CHECK_KIND(unsupported, fn != nullptr,
                    "{} has type {}, which dspark cannot dequantize (supported: F32, F16, BF16, "
                    "Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
                    what, ggml_type_name(type));
  const GgmlBlock block = *ggml_block(type);
  DSPARK_CHECK(n % block.elements == 0, "{}: {} elements are not whole {} blocks", what, n,
               ggml_type_name(type));
  const int64_t n_blocks = n / block.elements;
  ThreadPool::global().parallel_for(n_blocks, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(src + i * block.bytes, dst + i * block.elements);
  });
}

}  // namespace dspark
