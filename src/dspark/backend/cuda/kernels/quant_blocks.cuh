// Device decoding of the block formats (GGUF's and Q8_A; core/quant.h documents the layouts;
// core/quant.cpp's dequantize_blocks is the definition). Private to backend/cuda/kernels. Two views
// of a block:
//
//  - decode32: 32 consecutive values of a block as f32, with the reference's arithmetic in its
//    order (__fmul_rn / __fadd_rn: never contracted into an FMA), so the values are the host's bit
//    for bit. Used by the row dequantization (gather_rows_blocks, the dequantized weights of the
//    prefill path: quant_rows.cu).
//  - the tensor-core view (linear_quant.cu): a super-block of 256 values (one K-quant block, or
//    eight legacy blocks of 32) is 4 units of 4 MMA steps; a step is 16 values of one scale
//    sub-block, of which lane c of a quad holds 4 consecutive ones (elements 4c .. 4c + 3 of the
//    step's 16) as the bytes of one 32-bit word: small unsigned integers q (QuantMma::unit) with
//    the value = D * (q - kOffset) + Mn, D and Mn per sub-block (sub_scales). q - kOffset is
//    exact in bf16 and f16, so the MMA sums exact products; D and Mn are applied in f32 per
//    sub-block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "dspark/backend/cuda/policy/linear_quant.h"
#include "dspark/core/quant.h"

namespace dspark::cuda::quant {

// core/quant.h's block sizes as constants (quant_block is a host function).
constexpr int64_t quant_block_elements(QuantType q) {
  return q == QuantType::q4_k || q == QuantType::q5_k || q == QuantType::q6_k ? 256 : 32;
}
constexpr int64_t quant_block_bytes(QuantType q) {
  switch (q) {
    case QuantType::q4_0:
      return 18;
    case QuantType::q4_1:
      return 20;
    case QuantType::q5_0:
      return 22;
    case QuantType::q5_1:
      return 24;
    case QuantType::q8_0:
      return 34;
    case QuantType::q4_k:
      return 144;
    case QuantType::q5_k:
      return 176;
    case QuantType::q6_k:
      return 210;
    case QuantType::q8_a:
      return 36;
    case QuantType::q4_a64:  // MLX's groups of 64 / 128: uploaded as Q4_1 / Q8_A blocks
    case QuantType::q4_a128:
    case QuantType::q8_a64:
    case QuantType::q8_a128:
      break;
  }
  return 0;
}

// Calls f(QuantTag<Q>{}) for the run-time type q (host code).
template <QuantType Q>
struct QuantTag {};
template <typename F>
void dispatch_quant(QuantType q, F&& f) {
  switch (q) {
    case QuantType::q4_0:
      return f(QuantTag<QuantType::q4_0>{});
    case QuantType::q4_1:
      return f(QuantTag<QuantType::q4_1>{});
    case QuantType::q5_0:
      return f(QuantTag<QuantType::q5_0>{});
    case QuantType::q5_1:
      return f(QuantTag<QuantType::q5_1>{});
    case QuantType::q8_0:
      return f(QuantTag<QuantType::q8_0>{});
    case QuantType::q4_k:
      return f(QuantTag<QuantType::q4_k>{});
    case QuantType::q5_k:
      return f(QuantTag<QuantType::q5_k>{});
    case QuantType::q6_k:
      return f(QuantTag<QuantType::q6_k>{});
    case QuantType::q8_a:
      return f(QuantTag<QuantType::q8_a>{});
    case QuantType::q4_a64:  // never here: uploaded as Q4_1 / Q8_A blocks (ops check it)
    case QuantType::q4_a128:
    case QuantType::q8_a64:
    case QuantType::q8_a128:
      return;
  }
}

// ---- bytes -----------------------------------------------------------------------------------
// (Host-callable too, so that the block views can be checked against core's on the CPU.)
#define DSPARK_QHD __host__ __device__ __forceinline__

DSPARK_QHD uint32_t byte_at(const uint8_t* p, int i) {
  return p[i];
}

// The f16 at p (2-byte aligned) as f32 (exact).
DSPARK_QHD float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

// The little-endian 32-bit word at p, p 4-byte aligned.
DSPARK_QHD uint32_t word_at(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The little-endian 32-bit word at p, p 2-byte aligned (shared memory): the two aligned words
// around it, funnel-shifted. Reads up to 3 bytes past p + 3.
DSPARK_QHD uint32_t word_at_unaligned(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  return __funnelshift_r(w[0], w[1], static_cast<unsigned>(a & 3u) * 8u);
#else
  return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
#endif
}

// The f32 with the bits of u.
DSPARK_QHD float float_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

// f32 products and sums rounded once each (never contracted into an FMA), as the host's.
DSPARK_QHD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
DSPARK_QHD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
DSPARK_QHD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// PTX prmt (default mode): byte i of the result is byte (selector >> 4i) & 7 of {b, a}.
DSPARK_QHD uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
#else
  const uint64_t ab = (uint64_t{b} << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (selector >> (4 * i)) & 7u;
    const uint32_t byte = static_cast<uint32_t>((ab >> (8 * sel)) & 0xFFu);
    r |= ((selector >> (4 * i)) & 8u) != 0 ? ((byte & 0x80u) != 0 ? 0xFFu : 0u) << (8 * i)
                                           : byte << (8 * i);
  }
  return r;
#endif
}

// The 6-bit scale and min of sub-block j (0..7) of a K-quant block's 12 scale bytes `q`
// (core/quant.cpp's scale_min_k4).
DSPARK_QHD void scale_min_k4(int j, const uint8_t* q, uint32_t& sc, uint32_t& m) {
  if (j < 4) {
    sc = byte_at(q, j) & 63u;
    m = byte_at(q, j + 4) & 63u;
  } else {
    sc = (byte_at(q, j + 4) & 0x0Fu) | ((byte_at(q, j - 4) >> 6) << 4);
    m = (byte_at(q, j + 4) >> 4) | ((byte_at(q, j) >> 6) << 4);
  }
}

// ---- decode32: the reference values ----------------------------------------------------------

// Values [32 part, 32 part + 32) of the block at `b` (part < elements / 32), as core/quant.cpp
// computes them.
template <QuantType Q>
DSPARK_QHD void decode32(const uint8_t* b, int part, float (&y)[32]) {
  if constexpr (Q == QuantType::q4_0) {
    const float d = half_at(b);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = byte_at(b + 2, j);
      y[j] = mul_rn(d, static_cast<float>(static_cast<int>(q & 0x0Fu) - 8));
      y[j + 16] = mul_rn(d, static_cast<float>(static_cast<int>(q >> 4) - 8));
    }
  } else if constexpr (Q == QuantType::q4_1) {
    const float d = half_at(b), m = half_at(b + 2);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = byte_at(b + 4, j);
      y[j] = add_rn(mul_rn(d, static_cast<float>(q & 0x0Fu)), m);
      y[j + 16] = add_rn(mul_rn(d, static_cast<float>(q >> 4)), m);
    }
  } else if constexpr (Q == QuantType::q5_0 || Q == QuantType::q5_1) {
    constexpr bool kMin = Q == QuantType::q5_1;
    const float d = half_at(b), m = kMin ? half_at(b + 2) : 0.0f;
    const uint8_t* h = b + (kMin ? 4 : 2);
    const uint32_t qh =
        byte_at(h, 0) | (byte_at(h, 1) << 8) | (byte_at(h, 2) << 16) | (byte_at(h, 3) << 24);
    const uint8_t* qs = h + 4;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t q = byte_at(qs, j);
      const int lo = static_cast<int>((q & 0x0Fu) | (((qh >> j) & 1u) << 4));
      const int hi = static_cast<int>((q >> 4) | (((qh >> (j + 16)) & 1u) << 4));
      if constexpr (kMin) {
        y[j] = add_rn(mul_rn(d, static_cast<float>(lo)), m);
        y[j + 16] = add_rn(mul_rn(d, static_cast<float>(hi)), m);
      } else {
        y[j] = mul_rn(d, static_cast<float>(lo - 16));
        y[j + 16] = mul_rn(d, static_cast<float>(hi - 16));
      }
    }
  } else if constexpr (Q == QuantType::q8_0) {
    const float d = half_at(b);
#pragma unroll
    for (int j = 0; j < 32; ++j)
      y[j] = mul_rn(d, static_cast<float>(static_cast<int8_t>(byte_at(b + 2, j))));
  } else if constexpr (Q == QuantType::q8_a) {
    const float d = half_at(b), m = half_at(b + 2);
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = add_rn(mul_rn(d, static_cast<float>(byte_at(b + 4, j))), m);
  } else if constexpr (Q == QuantType::q4_k || Q == QuantType::q5_k) {
    // part p: group g = p / 2 of 64 values, its low (p even) or high nibbles.
    constexpr bool k5 = Q == QuantType::q5_k;
    const float d = half_at(b), dmin = half_at(b + 2);
    const int g = part >> 1, high = part & 1;
    uint32_t sc, m;
    scale_min_k4(2 * g + high, b + 4, sc, m);
    const float d1 = mul_rn(d, static_cast<float>(sc)), m1 = mul_rn(dmin, static_cast<float>(m));
    const uint8_t* qs = b + (k5 ? 48 : 16) + 32 * g;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      uint32_t q = high ? byte_at(qs, l) >> 4 : byte_at(qs, l) & 0x0Fu;
      if constexpr (k5) q += ((byte_at(b + 16, l) >> (2 * g + high)) & 1u) ? 16u : 0u;
      y[l] = sub_rn(mul_rn(d1, static_cast<float>(q)), m1);
    }
  } else {
    static_assert(Q == QuantType::q6_k);
    // part p: half H = p / 4 of 128 values, quarter qi = p % 4: y[l + 32 qi] of that half.
    const int half = part >> 2, qi = part & 3;
    const uint8_t* ql = b + 64 * half + 32 * (qi & 1);
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    const float d = half_at(b + 208);
    const int shift = 4 * (qi >> 1);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int q = static_cast<int>(((byte_at(ql, l) >> shift) & 0x0Fu) |
                                     (((byte_at(qh, l) >> (2 * qi)) & 3u) << 4)) -
                    32;
      y[l] = mul_rn(mul_rn(d, static_cast<float>(sc[l / 16 + 2 * qi])), static_cast<float>(q));
    }
  }
}

// ---- the tensor-core view --------------------------------------------------------------------

// Per format (QuantMmaFormat in policy/linear_quant.h holds the host's copy of the sizes):
//   kSbBytes: bytes of a super-block of 256 values; kSubs: scale sub-blocks per super-block;
//   kStepsPerSub: MMA steps (16 values) per sub-block; kMin: whether Mn is non-zero; kOffset:
//   value = D * (q - kOffset) + Mn; kSigned: the unit's bytes are int8 (Q8_0: q ^ 0x80 is the
//   unsigned q with kOffset 128; wide_bytes below: bytes up to 255); kAligned: the unit's words
//   are 4-byte aligned in the stage.
//   unit(sb, u, c, q): the 4 steps of unit u for lane c; elem(u, s): the first value of step s;
//   sub(u, s): its sub-block. sub_scales (below): D and Mn of a sub-block.
template <QuantType Q>
struct QuantMma;

namespace detail {
constexpr uint32_t kLo = 0x0F0F0F0Fu;
// Bit 4 of byte i set from bit i of the 4-bit x (the fifth bits of Q5_0 / Q5_1).
DSPARK_QHD uint32_t spread4(uint32_t x) {
  return ((x * 0x00204081u) & 0x01010101u) << 4;
}
}  // namespace detail

// Legacy formats: unit u = blocks 2u and 2u + 1; steps 0, 1 = block 2u's values 0-15 and 16-31,
// steps 2, 3 = block 2u + 1's; a sub-block is a block.
struct LegacySteps {
  static constexpr int kSubs = 8, kStepsPerSub = 2;
  __host__ __device__ static constexpr int elem(int u, int s) { return 64 * u + 16 * s; }
  __host__ __device__ static constexpr int sub(int u, int s) { return 2 * u + s / 2; }
};

template <>
struct QuantMma<QuantType::q4_0> : LegacySteps {
  static constexpr int kSbBytes = 144, kOffset = 8;
  static constexpr bool kMin = false, kSigned = false, kAligned = false;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w = word_at_unaligned(sb + (2 * u + i) * 18 + 2 + 4 * c);
      q[2 * i] = w & detail::kLo;
      q[2 * i + 1] = (w >> 4) & detail::kLo;
    }
  }
};

template <>
struct QuantMma<QuantType::q4_1> : LegacySteps {
  static constexpr int kSbBytes = 160, kOffset = 0;
  static constexpr bool kMin = true, kSigned = false, kAligned = true;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t w = word_at(sb + (2 * u + i) * 20 + 4 + 4 * c);
      q[2 * i] = w & detail::kLo;
      q[2 * i + 1] = (w >> 4) & detail::kLo;
    }
  }
};

template <>
struct QuantMma<QuantType::q5_0> : LegacySteps {
  static constexpr int kSbBytes = 176, kOffset = 16;
  static constexpr bool kMin = false, kSigned = false, kAligned = false;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* blk = sb + (2 * u + i) * 22;
      const uint32_t qh = word_at_unaligned(blk + 2), w = word_at_unaligned(blk + 6 + 4 * c);
      q[2 * i] = (w & detail::kLo) | detail::spread4((qh >> (4 * c)) & 0xFu);
      q[2 * i + 1] = ((w >> 4) & detail::kLo) | detail::spread4((qh >> (16 + 4 * c)) & 0xFu);
    }
  }
};

template <>
struct QuantMma<QuantType::q5_1> : LegacySteps {
  static constexpr int kSbBytes = 192, kOffset = 0;
  static constexpr bool kMin = true, kSigned = false, kAligned = true;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* blk = sb + (2 * u + i) * 24;
      const uint32_t qh = word_at(blk + 4), w = word_at(blk + 8 + 4 * c);
      q[2 * i] = (w & detail::kLo) | detail::spread4((qh >> (4 * c)) & 0xFu);
      q[2 * i + 1] = ((w >> 4) & detail::kLo) | detail::spread4((qh >> (16 + 4 * c)) & 0xFu);
    }
  }
};

template <>
struct QuantMma<QuantType::q8_0> : LegacySteps {
  static constexpr int kSbBytes = 272, kOffset = 128;
  static constexpr bool kMin = false, kSigned = true, kAligned = false;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* blk = sb + (2 * u + i) * 34 + 2 + 4 * c;
      q[2 * i] = word_at_unaligned(blk);
      q[2 * i + 1] = word_at_unaligned(blk + 16);
    }
  }
};

// Q8_A: Q8_0's steps with unsigned bytes and a min; its blocks of 36 bytes keep the words aligned.
template <>
struct QuantMma<QuantType::q8_a> : LegacySteps {
  static constexpr int kSbBytes = 288, kOffset = 0;
  static constexpr bool kMin = true, kSigned = false, kAligned = true;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint8_t* blk = sb + (2 * u + i) * 36 + 4 + 4 * c;
      q[2 * i] = word_at(blk);
      q[2 * i + 1] = word_at(blk + 16);
    }
  }
};

// Q4_K / Q5_K: unit u = the group of 64 values whose 4-bit parts are bytes 32u .. 32u + 31 of qs:
// steps 0, 1 = the low nibbles (sub-block 2u), steps 2, 3 = the high nibbles (sub-block 2u + 1).
struct KquantSteps {
  static constexpr int kSubs = 8, kStepsPerSub = 2;
  __host__ __device__ static constexpr int elem(int u, int s) { return 64 * u + 16 * s; }
  __host__ __device__ static constexpr int sub(int u, int s) { return 2 * u + s / 2; }
};

template <>
struct QuantMma<QuantType::q4_k> : KquantSteps {
  static constexpr int kSbBytes = 144, kOffset = 0;
  static constexpr bool kMin = true, kSigned = false, kAligned = true;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
    const uint32_t w0 = word_at(sb + 16 + 32 * u + 4 * c), w1 = word_at(sb + 32 + 32 * u + 4 * c);
    q[0] = w0 & detail::kLo;
    q[1] = w1 & detail::kLo;
    q[2] = (w0 >> 4) & detail::kLo;
    q[3] = (w1 >> 4) & detail::kLo;
  }
};

template <>
struct QuantMma<QuantType::q5_k> : KquantSteps {
  static constexpr int kSbBytes = 176, kOffset = 0;
  static constexpr bool kMin = true, kSigned = false, kAligned = true;
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
    const uint32_t w0 = word_at(sb + 48 + 32 * u + 4 * c), w1 = word_at(sb + 64 + 32 * u + 4 * c);
    const uint32_t h0 = word_at(sb + 16 + 4 * c), h1 = word_at(sb + 32 + 4 * c);
    const int lo = 2 * u, hi = 2 * u + 1;
    q[0] = (w0 & detail::kLo) | (((h0 >> lo) & 0x01010101u) << 4);
    q[1] = (w1 & detail::kLo) | (((h1 >> lo) & 0x01010101u) << 4);
    q[2] = ((w0 >> 4) & detail::kLo) | (((h0 >> hi) & 0x01010101u) << 4);
    q[3] = ((w1 >> 4) & detail::kLo) | (((h1 >> hi) & 0x01010101u) << 4);
  }
};

// Q6_K: unit u = half H = u / 2, l-range lh = u % 2 (l = 16 lh .. 16 lh + 15); step s = quarter
// qi = s: the values 128 H + 32 qi + l, one sub-block of 16 each (8 H + 2 qi + lh).
template <>
struct QuantMma<QuantType::q6_k> {
  static constexpr int kSbBytes = 210, kSubs = 16, kStepsPerSub = 1, kOffset = 32;
  static constexpr bool kMin = false, kSigned = false, kAligned = false;
  __host__ __device__ static constexpr int elem(int u, int s) {
    return 128 * (u / 2) + 32 * s + 16 * (u % 2);
  }
  __host__ __device__ static constexpr int sub(int u, int s) { return 8 * (u / 2) + 2 * s + u % 2; }
  __host__ __device__ static void unit(const uint8_t* sb, int u, int c, uint32_t (&q)[4]) {
    const int half = u >> 1, l = 16 * (u & 1) + 4 * c;
    const uint32_t a = word_at_unaligned(sb + 64 * half + l);
    const uint32_t a2 = word_at_unaligned(sb + 64 * half + 32 + l);
    const uint32_t h = word_at_unaligned(sb + 128 + 32 * half + l);
    q[0] = (a & detail::kLo) | ((h << 4) & 0x30303030u);
    q[1] = (a2 & detail::kLo) | ((h << 2) & 0x30303030u);
    q[2] = ((a >> 4) & detail::kLo) | (h & 0x30303030u);
    q[3] = ((a2 >> 4) & detail::kLo) | ((h >> 2) & 0x30303030u);
  }
};

// Whether a format's unit bytes go up to 255 (Q8_0 after its q ^ 0x80, Q8_A).
template <QuantType Q>
constexpr bool wide_bytes() {
  return Q == QuantType::q8_0 || Q == QuantType::q8_a;
}

// The A-operand pairs of one step's word q (4 unsigned bytes, or int8 when kSigned) for a 16-bit
// MMA type T: p01 = (q0 - off, q1 - off), p23 = (q2 - off, q3 - off), lower element in the low
// half, exact. Bytes below 128 (below 1024 for f16) become T through a magic exponent byte (0x43:
// bf16 128 + q, 0x64: f16 1024 + q) and one packed subtraction; Q8_0 and Q8_A in bf16 (bytes up
// to 255) go through f32 (0x4B000000 | u is 2^23 + u).
template <typename T, QuantType Q>
DSPARK_QHD void step_pairs(uint32_t q, uint32_t& p01, uint32_t& p23) {
  using F = QuantMma<Q>;
  if constexpr (F::kSigned) q ^= 0x80808080u;
  if constexpr (std::is_same_v<T, __half>) {
    constexpr unsigned short kBias = static_cast<unsigned short>(0x6400 + F::kOffset);
    const __half2 bias = __halves2half2(__ushort_as_half(kBias), __ushort_as_half(kBias));
    const uint32_t r01 = prmt(q, 0x64646464u, 0x5140u), r23 = prmt(q, 0x64646464u, 0x5342u);
    __half2 h01, h23;
    __builtin_memcpy(&h01, &r01, 4);
    __builtin_memcpy(&h23, &r23, 4);
    h01 = __hsub2(h01, bias);
    h23 = __hsub2(h23, bias);
    __builtin_memcpy(&p01, &h01, 4);
    __builtin_memcpy(&p23, &h23, 4);
  } else if constexpr (wide_bytes<Q>()) {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    constexpr float kBias = 8388608.0f + F::kOffset;  // 2^23 + the offset
    const float f0 = float_bits(prmt(q, 0x4B000000u, 0x7540u)) - kBias;
    const float f1 = float_bits(prmt(q, 0x4B000000u, 0x7541u)) - kBias;
    const float f2 = float_bits(prmt(q, 0x4B000000u, 0x7542u)) - kBias;
    const float f3 = float_bits(prmt(q, 0x4B000000u, 0x7543u)) - kBias;
    const __nv_bfloat162 b01 = __floats2bfloat162_rn(f0, f1), b23 = __floats2bfloat162_rn(f2, f3);
    __builtin_memcpy(&p01, &b01, 4);
    __builtin_memcpy(&p23, &b23, 4);
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    constexpr unsigned short kBias = static_cast<unsigned short>(0x4300 + F::kOffset);
    const __nv_bfloat162 bias =
        __halves2bfloat162(__ushort_as_bfloat16(kBias), __ushort_as_bfloat16(kBias));
    const uint32_t r01 = prmt(q, 0x43434343u, 0x5140u), r23 = prmt(q, 0x43434343u, 0x5342u);
    __nv_bfloat162 h01, h23;
    __builtin_memcpy(&h01, &r01, 4);
    __builtin_memcpy(&h23, &r23, 4);
    h01 = __hsub2(h01, bias);
    h23 = __hsub2(h23, bias);
    __builtin_memcpy(&p01, &h01, 4);
    __builtin_memcpy(&p23, &h23, 4);
  }
}

// A row's entry of the tensor-core kernel's scale table for one sub-block: D as a pair of x's
// 16-bit type (both halves equal), and for formats with a min term Mn likewise (.x = D, .y = Mn).
template <bool kMin>
using ScaleEntry = std::conditional_t<kMin, uint2, uint32_t>;

template <typename T>
__device__ __forceinline__ uint32_t pair_of(float v) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(v, v);
    __builtin_memcpy(&r, &h, 4);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v, v);
    __builtin_memcpy(&r, &h, 4);
  }
  return r;
}

// a * b + c (or a * b without c) on packed pairs of T.
template <typename T, bool kAdd>
__device__ __forceinline__ uint32_t fma_pairs(uint32_t a, uint32_t b, uint32_t c) {
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  T2 x, y, z;
  __builtin_memcpy(&x, &a, 4);
  __builtin_memcpy(&y, &b, 4);
  __builtin_memcpy(&z, &c, 4);
  const T2 r = kAdd ? __hfma2(x, y, z) : __hmul2(x, y);
  uint32_t out;
  __builtin_memcpy(&out, &r, 4);
  return out;
}

// Sub-block j's D and Mn of the super-block at sb: value = D * (q - kOffset) + Mn (Mn = 0 for
// formats without a min).
template <QuantType Q>
DSPARK_QHD void sub_scales(const uint8_t* sb, int j, float& d, float& mn) {
  if constexpr (Q == QuantType::q4_k || Q == QuantType::q5_k) {
    uint32_t sc, m;
    scale_min_k4(j, sb + 4, sc, m);
    d = mul_rn(half_at(sb), static_cast<float>(sc));
    mn = -mul_rn(half_at(sb + 2), static_cast<float>(m));
  } else if constexpr (Q == QuantType::q6_k) {
    d = mul_rn(half_at(sb + 208), static_cast<float>(static_cast<int8_t>(byte_at(sb + 192, j))));
    mn = 0.0f;
  } else {
    const uint8_t* blk = sb + j * static_cast<int>(quant_block_bytes(Q));
    d = half_at(blk);
    mn = QuantMma<Q>::kMin ? half_at(blk + 2) : 0.0f;
  }
}

// The scale-table entries of half h (0 or 1) of the sub-blocks of the super-block at sb, rounded
// to T: two lanes share a super-block's entries, so that every lane of a warp has work. Q4_K /
// Q5_K decode their half's four 6-bit scales and mins from the 12 scale bytes as packed bytes,
// without branches on h (sub_scales' values bit for bit).
template <typename T, QuantType Q>
__device__ __forceinline__ void pack_scales_half(const uint8_t* sb, int h,
                                                 ScaleEntry<QuantMma<Q>::kMin>* out) {
  using F = QuantMma<Q>;
  constexpr int kHalf = F::kSubs / 2;
  if constexpr (Q == QuantType::q4_k || Q == QuantType::q5_k) {
    // scale_min_k4: sub-block i < 4 takes bits 0-5 of bytes i (scale) and 4 + i (min); 4 + i
    // takes the nibbles of byte 8 + i with bits 6-7 of bytes i and 4 + i on top.
    const uint32_t a = word_at(sb + 4), b = word_at(sb + 8), c = word_at(sb + 12);
    const uint32_t sc = h == 0 ? a & 0x3F3F3F3Fu : (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    const uint32_t mq =
        h == 0 ? b & 0x3F3F3F3Fu : ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    const float d = half_at(sb), dmin = half_at(sb + 2);
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const float di = mul_rn(d, static_cast<float>((sc >> (8 * i)) & 0xFFu));
      const float mi = mul_rn(-dmin, static_cast<float>((mq >> (8 * i)) & 0xFFu));  // = -(dmin m)
      out[h * kHalf + i] = make_uint2(pair_of<T>(di), pair_of<T>(mi));
    }
  } else {
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const int j = h * kHalf + i;
      float d, mn;
      sub_scales<Q>(sb, j, d, mn);
      if constexpr (F::kMin) {
        out[j] = make_uint2(pair_of<T>(d), pair_of<T>(mn));
      } else {
        out[j] = pair_of<T>(d);
      }
    }
  }
}

// The A-operand pairs of one step's word q with the sub-block's entry e: the values
// D * (q - offset) + Mn in T. q - offset is exact; D and Mn are rounded to T, then the packed FMA
// rounds the weight once more (the dequantizing path rounds the f32 weight once: close, not the
// same bits).
template <typename T, QuantType Q>
__device__ __forceinline__ void step_values(uint32_t q, ScaleEntry<QuantMma<Q>::kMin> e,
                                            uint32_t& p01, uint32_t& p23) {
  step_pairs<T, Q>(q, p01, p23);
  if constexpr (QuantMma<Q>::kMin) {
    p01 = fma_pairs<T, true>(p01, e.x, e.y);
    p23 = fma_pairs<T, true>(p23, e.x, e.y);
  } else {
    p01 = fma_pairs<T, false>(p01, e, 0u);
    p23 = fma_pairs<T, false>(p23, e, 0u);
  }
}

// The host's table (policy/linear_quant.h), the block sizes and the device's view agree.
template <QuantType Q>
constexpr bool matches_policy() {
  using F = QuantMma<Q>;
  constexpr QuantMmaFormat f = quant_mma_format(Q);
  return f.sb_bytes == F::kSbBytes && f.subs == F::kSubs && f.has_min == F::kMin &&
         F::kSbBytes == 256 / quant_block_elements(Q) * quant_block_bytes(Q);
}
static_assert(matches_policy<QuantType::q4_0>() && matches_policy<QuantType::q4_1>() &&
              matches_policy<QuantType::q5_0>() && matches_policy<QuantType::q5_1>() &&
              matches_policy<QuantType::q8_0>() && matches_policy<QuantType::q4_k>() &&
              matches_policy<QuantType::q5_k>() && matches_policy<QuantType::q6_k>() &&
              matches_policy<QuantType::q8_a>());

}  // namespace dspark::cuda::quant
