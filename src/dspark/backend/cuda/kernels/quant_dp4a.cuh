// The integer products of the few-row kernels with block-quantized weights (linear_quant_gemv.cu,
// moe_linear_blocks.cu), as the CPU's quant_gemm computes them (backend/cpu/kernels/
// quant_gemm.h): x rounded per block of 32 values to int8 with one f32 scale (quantize_x, into an
// x region of shared or global memory), each weight word of 4 values multiplied with 4 of x by one
// dp4a, the integer sums scaled per sub-block in f32 (unit_accumulate). A lane takes one unit of
// 64 values of a super-block (quant_blocks.cuh's QuantMma view). Private to backend/cuda/kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/kernels/quant_blocks.cuh"
#include "dspark/core/quant.h"

namespace dspark::cuda::quant {

// The offset subtracted from a weight byte before the product (quant_gemm.h's integer w).
template <QuantType Q>
constexpr int dp4a_offset() {
  return Q == QuantType::q4_0 ? 8 : Q == QuantType::q5_0 ? 16 : Q == QuantType::q6_k ? 32 : 0;
}

// The x region of row r: int8 q, then f32 d and s per block of 32, then int32 sums per 16 values.
// q is kept per super-block of 256 values in the order the math reads it: 320 bytes (64 of them
// padding) per super-block, and in it the 16-value chunk of unit u, step s (QuantMma's view: a
// unit's 64 values are 4 steps of 16) at 64 s + 16 u. The 4 lanes of a super-block then read one
// step's x as 64 consecutive bytes, and the next super-block's lanes the next 64 bytes of the 128
// a quarter warp reads: no bank conflicts.
struct XView {
  const uint8_t* base;
  int row_bytes, q_bytes, blocks;
  __device__ __forceinline__ const uint8_t* q(int r) const { return base + r * row_bytes; }
  __device__ __forceinline__ const float* d(int r) const {
    return reinterpret_cast<const float*>(base + r * row_bytes + q_bytes);
  }
  __device__ __forceinline__ const float* s(int r) const { return d(r) + blocks; }
  __device__ __forceinline__ const int* sum16(int r) const {
    return reinterpret_cast<const int*>(s(r) + blocks);
  }
};
constexpr int kXSuperBlockBytes = 320;

// Where step s of unit u of super-block sb starts in a row's q.
__device__ __forceinline__ int xq_step(int sb, int u, int s) {
  return sb * kXSuperBlockBytes + 64 * s + 16 * u;
}

// The (unit, step) of the 16-value chunk c16 (0..15) of a super-block, for format Q.
template <QuantType Q>
__device__ __forceinline__ int xq_chunk_offset(int c16) {
  if constexpr (Q == QuantType::q6_k) {
    // elem(u, s) = 128 (u / 2) + 32 s + 16 (u % 2)
    const int u = 2 * (c16 >> 3) + (c16 & 1), s = (c16 & 7) >> 1;
    return 64 * s + 16 * u;
  } else {
    // elem(u, s) = 64 u + 16 s
    return 64 * (c16 & 3) + 16 * (c16 >> 2);
  }
}

// 8 consecutive values of x from element i (a multiple of 8; x 16-byte aligned) as f32.
__device__ __forceinline__ void load8(const void* x, int64_t i, device::FloatKind kind,
                                      float (&v)[8]) {
  if (kind == device::FloatKind::f32) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(x) + i));
    const float4 b = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(x) + i) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + i));
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const auto lo = static_cast<unsigned short>(words[j] & 0xFFFFu);
    const auto hi = static_cast<unsigned short>(words[j] >> 16);
    if (kind == device::FloatKind::bf16) {
      v[2 * j] = __bfloat162float(__ushort_as_bfloat16(lo));
      v[2 * j + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
    } else {
      v[2 * j] = __half2float(__ushort_as_half(lo));
      v[2 * j + 1] = __half2float(__ushort_as_half(hi));
    }
  }
}

// Rounds the m rows of x into the x region (quant_gemm.cpp's quantize_x_row, bit for bit): a
// thread takes 8 consecutive values, 4 neighbouring lanes a block of 32; the loads of up to 4
// groups per thread are issued before any of their math. Thread `tid` of the kThreads threads of a
// CTA (every thread calls it: the lanes of a block shuffle). P: the call's parameters, with x
// (m rows of k values, ldx apart, of kind x_kind; k a multiple of 256) and the region's row layout
// (layout.x_row_bytes, layout.x_q_bytes: QuantGemvLayout). A P with a member load_row8(r, col, v)
// supplies the 8 values itself.
template <QuantType Q, int kThreads, typename P>
__device__ void quantize_x(const P& p, uint8_t* region, int tid) {
  constexpr int kUnroll = 4;
  const int lane = tid & 31;
  const int groups_per_row = p.k / 8, groups = p.m * groups_per_row, blocks = p.k / 32;
  for (int base = 0; base < groups; base += kUnroll * kThreads) {
    float v[kUnroll][8];
#pragma unroll
    for (int it = 0; it < kUnroll; ++it) {
      const int g = base + it * kThreads + tid;
      if (g < groups) {
        const int r = g / groups_per_row, col = 8 * (g % groups_per_row);
        if constexpr (requires { p.load_row8(r, col, v[it]); })
          p.load_row8(r, col, v[it]);  // a caller that computes x's values as it loads them
        else
          load8(p.x, r * p.ldx + col, p.x_kind, v[it]);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[it][j] = 0.0f;
      }
    }
#pragma unroll
    for (int it = 0; it < kUnroll; ++it) {
      // The 4 lanes of a block are all in range or all out (k is a multiple of 32), so the
      // shuffles below run on every lane and only the stores are guarded.
      const int g = base + it * kThreads + tid;
      float amax = 0.0f;
      int finite = 1;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float a = fabsf(v[it][j]);
        finite &= a <= 3.402823466e38f ? 1 : 0;  // 0 for inf and NaN
        amax = fmaxf(amax, a);
      }
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        finite &= __shfl_xor_sync(0xffffffffu, finite, o);
      }
      int q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      float d = 0.0f;
      if (finite == 0) {
        d = __int_as_float(0x7fc00000);
      } else if (amax >= 1e-30f) {
        const float inv = __fdiv_rn(127.0f, amax);
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = static_cast<int>(rintf(__fmul_rn(v[it][j], inv)));
        d = __fdiv_rn(amax, 127.0f);
      }
      int own = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) own += q[j];
      const int s16 = own + __shfl_xor_sync(0xffffffffu, own, 1);
      const int sum = s16 + __shfl_xor_sync(0xffffffffu, s16, 2);
      if (g < groups) {
        const int r = g / groups_per_row, col = 8 * (g % groups_per_row), b = col / 32;
        uint8_t* row = region + r * p.layout.x_row_bytes;
        uint32_t w0 = 0, w1 = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          w0 |= (static_cast<uint32_t>(q[j]) & 0xFFu) << (8 * j);
          w1 |= (static_cast<uint32_t>(q[4 + j]) & 0xFFu) << (8 * j);
        }
        const int in_sb = col & 255;
        auto* dst = reinterpret_cast<uint32_t*>(row + (col >> 8) * kXSuperBlockBytes +
                                                xq_chunk_offset<Q>(in_sb >> 4) + (in_sb & 15));
        dst[0] = w0;
        dst[1] = w1;
        auto* dv = reinterpret_cast<float*>(row + p.layout.x_q_bytes);
        auto* sum16 = reinterpret_cast<int*>(dv + 2 * blocks);
        const int quarter = lane & 3;
        if (quarter == 0) {
          dv[b] = d;
          dv[blocks + b] = finite != 0 ? __fmul_rn(d, static_cast<float>(sum)) : d;
          sum16[2 * b] = s16;
        } else if (quarter == 2) {
          sum16[2 * b + 1] = s16;
        }
      }
    }
  }
}

// The 6-bit scales and mins of sub-blocks 2u and 2u + 1 of a Q4_K / Q5_K super-block (its first
// 16 bytes: d, dmin, the 12 packed bytes; 16-byte aligned in the slot), without branches
// (backend/cpu/kernels/quant_gemm_detail.h's k_scales_mins).
__device__ __forceinline__ void kquant_scales_mins(const uint8_t* sb, int u, int (&sc)[2],
                                                   int (&m)[2]) {
  const uint4 h = *reinterpret_cast<const uint4*>(sb);
  const uint32_t u0 = h.y, u1 = h.z, u2 = h.w;
  const uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
  const uint32_t sw = u < 2 ? sc_lo : sc_hi, mw = u < 2 ? m_lo : m_hi;
  const int shift = 16 * (u & 1);
  sc[0] = static_cast<int>((sw >> shift) & 0xFFu);
  sc[1] = static_cast<int>((sw >> (shift + 8)) & 0xFFu);
  m[0] = static_cast<int>((mw >> shift) & 0xFFu);
  m[1] = static_cast<int>((mw >> (shift + 8)) & 0xFFu);
}

// The 64 values of unit u of the super-block at sb as 16 words of 4 bytes: word 4 s + c holds
// values elem(u, s) + 4c .. + 3 (QuantMma's view). Q4_K (16-byte aligned in its slot) as two
// 16-byte reads, and its high nibbles (steps 2 and 3) left in place: 16 times the value, as
// unsigned bytes (kHighNibbles), which saves a shift per word; their dot products are divided by
// 16 exactly.
template <QuantType Q>
constexpr bool kHighNibbles = Q == QuantType::q4_k;

template <QuantType Q>
__device__ __forceinline__ void unit_words(const uint8_t* sb, int u, uint32_t (&q)[16]) {
  if constexpr (Q == QuantType::q4_k) {
    const uint4 a = *reinterpret_cast<const uint4*>(sb + 16 + 32 * u);
    const uint4 b = *reinterpret_cast<const uint4*>(sb + 32 + 32 * u);
    const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      q[c] = wa[c] & 0x0F0F0F0Fu;
      q[4 + c] = wb[c] & 0x0F0F0F0Fu;
      q[8 + c] = wa[c] & 0xF0F0F0F0u;
      q[12 + c] = wb[c] & 0xF0F0F0F0u;
    }
  } else {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t w[4];
      QuantMma<Q>::unit(sb, u, c, w);
#pragma unroll
      for (int st = 0; st < 4; ++st) q[4 * st + c] = w[st];
    }
  }
}

// a . b + c over 4 bytes: a unsigned, b signed.
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// dots[st]: the integer products of step st of unit u (its 4 words in q) with x's 16 values of
// that step in super-block sbg of row xq (steps 2 and 3: 16 times them with kHighNibbles). Q8_A's
// bytes (0..255) are multiplied unsigned.
template <QuantType Q>
__device__ __forceinline__ void unit_dots(const uint32_t (&q)[16], const uint8_t* xq, int sbg,
                                          int u, int (&dots)[4]) {
#pragma unroll
  for (int st = 0; st < 4; ++st) {
    const uint4 xw = *reinterpret_cast<const uint4*>(xq + xq_step(sbg, u, st));
    if ((kHighNibbles<Q> && st >= 2) || Q == QuantType::q8_a) {
      int dt = dp4a_us(q[4 * st], xw.x, 0);
      dt = dp4a_us(q[4 * st + 1], xw.y, dt);
      dt = dp4a_us(q[4 * st + 2], xw.z, dt);
      dots[st] = dp4a_us(q[4 * st + 3], xw.w, dt);
    } else {
      int dt = __dp4a(static_cast<int>(q[4 * st]), static_cast<int>(xw.x), 0);
      dt = __dp4a(static_cast<int>(q[4 * st + 1]), static_cast<int>(xw.y), dt);
      dt = __dp4a(static_cast<int>(q[4 * st + 2]), static_cast<int>(xw.z), dt);
      dots[st] = __dp4a(static_cast<int>(q[4 * st + 3]), static_cast<int>(xw.w), dt);
    }
  }
}

// Adds lane (super-block sbg, unit u)'s share of rows r0 .. r0 + M - 1 of x (the x region xv) times
// the weight row whose super-block is at sb to acc: the unit's 16 words q (unit_words) with each
// row's 64 values, per sub-block D * d_x * sum(q_w q_x) plus the offset and min terms. A row's
// arithmetic does not depend on M or r0.
// linear_quant_gemv.cu keeps the same loop inline in its kernel: called there, this function costs
// that kernel registers (spills) at one row of x.
template <QuantType Q, int M>
__device__ __forceinline__ void unit_accumulate(float (&acc)[M], const uint32_t (&q)[16],
                                                const uint8_t* sb, int u, int sbg, const XView& xv,
                                                int r0) {
  using F = QuantMma<Q>;
  constexpr int kOff = dp4a_offset<Q>();
  constexpr int kSubs = F::kStepsPerSub == 2 ? 2 : 4;  // sub-blocks of a unit
  if constexpr (Q == QuantType::q4_k || Q == QuantType::q5_k) {
    // Per sub-block: D * dx * sum(q_w q_x) - Mn * dx * sum(q_x), with the 6-bit scale and min
    // multiplied in integers (exact) and d, dmin applied in f32.
    int sc[2], mq[2];
    kquant_scales_mins(sb, u, sc, mq);
    const float d = half_at(sb), dmin = half_at(sb + 2);
    const int e = sbg * 256 + 64 * u;  // the unit's first value: its two blocks of x
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const uint8_t* xq = xv.q(r0 + r);
      int dots[4];
      unit_dots<Q>(q, xq, sbg, u, dots);
      const int4 s16 = *reinterpret_cast<const int4*>(xv.sum16(r0 + r) + (e >> 4));
      const float2 dx = *reinterpret_cast<const float2*>(xv.d(r0 + r) + (e >> 5));
      int dot[2] = {dots[0] + dots[1], dots[2] + dots[3]};
      if constexpr (kHighNibbles<Q>) dot[1] >>= 4;  // exact: a multiple of 16
      const int xsum[2] = {s16.x + s16.y, s16.z + s16.w};
      const float dxs[2] = {dx.x, dx.y};
#pragma unroll
      for (int k2 = 0; k2 < 2; ++k2) {
        const float t2 = fmaf(d, static_cast<float>(sc[k2] * dot[k2]),
                              -dmin * static_cast<float>(mq[k2] * xsum[k2]));
        acc[r] = fmaf(dxs[k2], t2, acc[r]);
      }
    }
  } else {
    float d[kSubs], mn[kSubs];
#pragma unroll
    for (int k2 = 0; k2 < kSubs; ++k2)
      sub_scales<Q>(sb, F::sub(u, k2 * F::kStepsPerSub), d[k2], mn[k2]);
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const uint8_t* xq = xv.q(r0 + r);
      int dots[4];
      unit_dots<Q>(q, xq, sbg, u, dots);
#pragma unroll
      for (int k2 = 0; k2 < kSubs; ++k2) {
        const int e = sbg * 256 + F::elem(u, k2 * F::kStepsPerSub);  // its first value
        const int blk = e >> 5;
        int dt = F::kStepsPerSub == 2 ? dots[2 * k2] + dots[2 * k2 + 1] : dots[k2];
        if constexpr (kOff != 0) {
          const int* s16 = xv.sum16(r0 + r) + (e >> 4);
          dt -= kOff * (F::kStepsPerSub == 2 ? s16[0] + s16[1] : s16[0]);
        }
        acc[r] = fmaf(__fmul_rn(d[k2], xv.d(r0 + r)[blk]), static_cast<float>(dt), acc[r]);
        if constexpr (F::kMin) acc[r] = fmaf(mn[k2], xv.s(r0 + r)[blk], acc[r]);
      }
    }
  }
}

}  // namespace dspark::cuda::quant
