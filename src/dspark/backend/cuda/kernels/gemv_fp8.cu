// FP8 (E4M3) weights with per-row scales (contract: ops/linear_fp8.h): the per-row quantization,
// and y[M, N] = x[M, K] . (e4m3(w8) * scale)^T for bf16 x on tensor cores. The same kernels take
// block scales (WeightFormat::fp8_blocks, ops/matmul.h: Hugging Face FP8 checkpoints' 128 x 128
// blocks): each 64-element chunk's MMA sums then start from zero and are added to the total times
// their block's scale (chunk() below; a chunk lies in one block of 64 << kb_shift columns, a 16-row
// tile in one block of rows), and the x-in-registers kernel is not used, so that a row's bits do
// not depend on M (choose_linear_fp8's m_invariant).
//
// A 16-row weight tile (the MMA's M) is summed by the 8 warps of a CTA, which split K evenly, by K
// only (gemv_tile.cuh); tokens are the MMA's N in tiles of 8. In 64-element chunks: lane (g = lane
// / 4, c = lane % 4) loads 16 bytes (16 codes, physical k = chunk * 64 + c * 16 .. + 15) of weight
// rows g and g + 8, and 32 bytes of each token row g + 8t at the same k. MMA step s (0..3) takes
// the codes' word s: bytes (0, 2) become the bf16 pair of logical k (2c, 2c + 1), bytes (1, 3) that
// of (2c + 8, 2c + 9); the tokens' bf16 pairs are permuted the same way (prmt).
//
// Two kernels with the same arithmetic in the same order (so the same bits):
//  - tile: one CTA per 16-row tile; each warp loads U chunks, then computes them.
//  - stream (M <= 16): at most two CTAs per SM, each walking row tiles blockIdx.x, + gridDim.x, ..
//    A warp's weight loads run one stage (U chunks) ahead of its math, across tile boundaries, and
//    the first stage is loaded before pdl_wait() (weights are never written by a forward), so the
//    memory system never waits for a CTA to end, start or sum its warps. x is loaded just before
//    its MMAs (the same K range of x for every tile of a warp: L1 hits after the first tile). The
//    warps' sums go through a double-buffered shared array (one barrier per tile). Optionally a
//    step covers two row tiles, which share x's loads.
// And a third with its own split of K (results equal to rounding, not in bits; a row's result
// still does not depend on M within it):
//  - x in registers (M <= 16, K <= 4096): one CTA of 16 warps per SM walks row tiles; warp w owns
//    4 chunks of K for the whole launch and holds their x in registers, so no tile reads x again;
//    weights come through shared memory by cp.async, one tile ahead (gemv_fp8_xreg_kernel).
// Which one runs: choose_linear_fp8 (policy/linear_fp8.h), from M, N, K and the SM count.
//
// An E4M3 code becomes bf16 exactly with bit moves: sign to bit 15, exponent and mantissa to bits
// 4..10, which reads as the value times 2^-120 (bf16's exponent bias is 127, E4M3's 7; codes with
// a zero exponent land on bf16 subnormals, which are also exact); one bf16 multiply by 2^120
// restores the value, so the MMA sees normal numbers only. NaN codes are never produced.
#include <cuda_fp8.h>

#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/policy/linear_fp8.h"

namespace dspark::cuda {
namespace {

using gemv_tile::kRows;
using gemv_tile::kSplitAlign;
using gemv_tile::kWarps;
using gemv_tile::load_stream;
using gemv_tile::word;
constexpr int kChunk = 64;    // K elements (bytes of a weight row) per chunk
constexpr int kMaxTiles = 8;  // token tiles of 8 per launch: 64 rows of x

template <typename TY>
struct Fp8Params {
  const uint8_t* w;        // [N, K]
  const float* scale;      // per row [N], or null (block scales)
  const __nv_bfloat16* x;  // [M, K], row stride ldx
  TY* y;                   // [M, N], row stride ldy
  const void* bias;
  device::FloatKind bias_kind;
  int64_t m, n, k, ldx, ldy;
  // Block scales (WeightFormat::fp8_blocks): [ceil(N / block_n), scale_ld], one per block_n rows
  // and 64 << kb_shift values of k; null with per-row scales.
  const float* block_scale = nullptr;
  int64_t scale_ld = 0, block_n = 0;
  int kb_shift = 0;
};

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
  return r;
}

// bf16 pairs of four E4M3 codes q = (b0, b1, b2, b3): lo = (b0, b2), hi = (b1, b3), exact.
__device__ __forceinline__ void e4m3x4_to_bf16(uint32_t q, uint32_t& lo, uint32_t& hi) {
  const uint32_t h = (q & 0x80008000u) | ((q >> 4) & 0x07F007F0u);
  const uint32_t l = ((q << 8) & 0x80008000u) | ((q << 4) & 0x07F007F0u);
  const __nv_bfloat162 two120 = __halves2bfloat162(__ushort_as_bfloat16(0x7B80),
                                                   __ushort_as_bfloat16(0x7B80));  // 2^120
  __nv_bfloat162 vh, vl;
  __builtin_memcpy(&vh, &h, 4);
  __builtin_memcpy(&vl, &l, 4);
  vh = __hmul2(vh, two120);
  vl = __hmul2(vl, two120);
  __builtin_memcpy(&hi, &vh, 4);
  __builtin_memcpy(&lo, &vl, 4);
}

// The MMA's A fragment of step s (0..3) of a chunk: weight rows g (a) and g + 8 (b), as bf16.
__device__ __forceinline__ void weight_step(const uint4& a, const uint4& b, int s, uint32_t& a0,
                                            uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  e4m3x4_to_bf16(word(a, s), a0, a2);
  e4m3x4_to_bf16(word(b, s), a1, a3);
}

// The four MMA steps of one 64-element chunk: a / b hold weight rows g and g + 8, x[t][0..1] the
// 16 bf16 of token row g + 8t at the same k.
template <int NT>
__device__ __forceinline__ void mma_chunk(float (&acc)[NT][4], const uint4& a, const uint4& b,
                                          const uint4 (&x)[NT][2]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t a0, a1, a2, a3;
    weight_step(a, b, s, a0, a1, a2, a3);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint32_t x01 = word(x[t][s / 2], 2 * (s % 2)), x23 = word(x[t][s / 2], 2 * (s % 2) + 1);
      device::mma<__nv_bfloat16>(acc[t], a0, a1, a2, a3, prmt(x01, x23, 0x5410),
                                 prmt(x01, x23, 0x7632));
    }
  }
}

// x[t][0..1] in place as mma_chunk's B operands: word 2i / 2i + 1 of the pair (x01, x23) of step
// s = 2 * (half) + i become prmt(x01, x23, 0x5410) / prmt(x01, x23, 0x7632).
template <int NT>
__device__ __forceinline__ void permute_x(uint4 (&x)[NT][2]) {
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4& v = x[t][h];
      const uint32_t a0 = prmt(v.x, v.y, 0x5410), a1 = prmt(v.x, v.y, 0x7632);
      const uint32_t b0 = prmt(v.z, v.w, 0x5410), b1 = prmt(v.z, v.w, 0x7632);
      v = make_uint4(a0, a1, b0, b1);
    }
}

// mma_chunk with x already permuted (permute_x): the same products in the same order.
template <int NT>
__device__ __forceinline__ void mma_chunk_permuted(float (&acc)[NT][4], const uint4& a,
                                                   const uint4& b, const uint4 (&x)[NT][2]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t a0, a1, a2, a3;
    weight_step(a, b, s, a0, a1, a2, a3);
#pragma unroll
    for (int t = 0; t < NT; ++t)
      device::mma<__nv_bfloat16>(acc[t], a0, a1, a2, a3, word(x[t][s / 2], 2 * (s % 2)),
                                 word(x[t][s / 2], 2 * (s % 2) + 1));
  }
}

// xs[t]: this lane's offset (c * 16) in token row g + 8t of x (rows past M read row M - 1, whose
// results are never stored).
// The block scales of the 16-row tile that starts at row0 (a tile past N reads the last one).
template <typename TY>
__device__ __forceinline__ const float* scale_row(const Fp8Params<TY>& p, int64_t row0) {
  return p.block_scale + (min(row0, p.n - 1) / p.block_n) * p.scale_ld;
}

// One 64-element chunk into acc: with per-row scales (KB false) the MMAs accumulate into acc;
// with block scales the chunk's sums start from zero and acc += its block's scale * sums, so a
// chunk never mixes two blocks (block_k is 64 << shift, tiles of 16 rows lie in one block_n).
template <bool KB, bool kPermuted, int NT>
__device__ __forceinline__ void chunk(float (&acc)[NT][4], const uint4& a, const uint4& b,
                                      const uint4 (&x)[NT][2], const float* srow, int64_t ch,
                                      int shift) {
  if constexpr (!KB) {
    if constexpr (kPermuted) {
      mma_chunk_permuted<NT>(acc, a, b, x);
    } else {
      mma_chunk<NT>(acc, a, b, x);
    }
  } else {
    float t[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) t[i][0] = t[i][1] = t[i][2] = t[i][3] = 0.0f;
    if constexpr (kPermuted) {
      mma_chunk_permuted<NT>(t, a, b, x);
    } else {
      mma_chunk<NT>(t, a, b, x);
    }
    const float s = __ldg(srow + (ch >> shift));
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(s, t[i][j], acc[i][j]);
  }
}

template <int NT, typename TY>
__device__ __forceinline__ void x_rows(const Fp8Params<TY>& p, const __nv_bfloat16* (&xs)[NT]) {
  const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xs[t] = p.x + min(static_cast<int64_t>(g + 8 * t), p.m - 1) * p.ldx + c * 16;
}

// x[t][0..1]: the 16 bf16 of token row g + 8t at chunk ch (xs[t] holds the lane's offset).
template <int NT>
__device__ __forceinline__ void load_x(uint4 (&xv)[NT][2], const __nv_bfloat16* const (&xs)[NT],
                                       int64_t ch) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const auto* px = reinterpret_cast<const uint4*>(xs[t] + ch * kChunk);
    xv[t][0] = __ldg(px);
    xv[t][1] = __ldg(px + 1);
  }
}

// One chunk that may reach past K (K % 16 == 0: a lane's 16 elements are all inside or all
// outside); wa / wb point at the lane's offset of weight rows g and g + 8.
template <bool KB, int NT>
__device__ __forceinline__ void mma_partial_chunk(float (&acc)[NT][4], const uint8_t* wa,
                                                  const uint8_t* wb,
                                                  const __nv_bfloat16* const (&xs)[NT], int64_t ch,
                                                  int64_t k, const float* srow, int shift) {
  const int c = threadIdx.x & 3;
  const bool in = ch * kChunk + c * 16 < k;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 xv[NT][2];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const auto* px = reinterpret_cast<const uint4*>(xs[t] + ch * kChunk);
    xv[t][0] = in ? __ldg(px) : zero;
    xv[t][1] = in ? __ldg(px + 1) : zero;
  }
  const uint4 a = in ? load_stream(wa + ch * kChunk) : zero;
  const uint4 b = in ? load_stream(wb + ch * kChunk) : zero;
  chunk<KB, false, NT>(acc, a, b, xv, srow, ch, shift);
}

// The epilogue: the row's scale, then its bias.
template <typename TY>
struct Store {
  const float* scale;
  const void* bias;
  device::FloatKind bias_kind;
  TY* y;
  int64_t ldy;
  __device__ explicit Store(const Fp8Params<TY>& p)
      : scale(p.scale), bias(p.bias), bias_kind(p.bias_kind), y(p.y), ldy(p.ldy) {}
  __device__ __forceinline__ void operator()(int64_t row, int token, float sum) const {
    if (scale) sum *= scale[row];
    if (bias) sum += device::load_float(bias, row, bias_kind);
    y[token * ldy + row] = device::from_float<TY>(sum);
  }
};

// NT: token tiles of 8 (M <= 8 * NT); U: chunks in flight per lane.
template <typename TY, int NT, int U, bool KB>
__global__ void __launch_bounds__(kWarps * 32) gemv_fp8_kernel(Fp8Params<TY> p) {
  __shared__ float partial[kWarps][kRows][8 * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t last = p.n - 1;  // rows past N / tokens past M read a valid row, never stored
  const uint8_t* wa = p.w + min(row0 + g, last) * p.k + c * 16;
  const uint8_t* wb = p.w + min(row0 + g + 8, last) * p.k + c * 16;
  const __nv_bfloat16* xs[NT];
  x_rows<NT>(p, xs);
  const float* srow = KB ? scale_row(p, row0) : nullptr;

  static_assert(kSplitAlign % U == 0);
  const gemv_tile::ChunkRange range = gemv_tile::warp_chunks(p.k, kChunk, warp);
  const int64_t begin = range.begin, end = range.end, end_full = range.end_full;
  if (c == 0) gemv_tile::prefetch_rows(wa, wb, range, kChunk);
  pdl_wait();
  pdl_launch_dependents();

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
  int64_t ch = begin;
  for (; ch + U <= end_full; ch += U) {
    uint4 a[U], b[U], xv[U][NT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u] = load_stream(wa + (ch + u) * kChunk);
      b[u] = load_stream(wb + (ch + u) * kChunk);
      load_x<NT>(xv[u], xs, ch + u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      chunk<KB, false, NT>(acc, a[u], b[u], xv[u], srow, ch + u, p.kb_shift);
  }
  for (; ch < end; ++ch) mma_partial_chunk<KB, NT>(acc, wa, wb, xs, ch, p.k, srow, p.kb_shift);

  gemv_tile::reduce_warps<NT>(partial, acc, row0, p.n, p.m, Store<TY>{p});
}

// The stream kernel (see the top): 2 CTAs per SM at most (__launch_bounds__ keeps it within 128
// registers); gridDim.x <= the number of blocks of RT row tiles (16 RT rows), which it walks.
// Stage j of a warp is chunks begin + jU .. begin + jU + U - 1 of the RT tiles of some block;
// `groups` stages per block, then the chunks of the warp's range that do not fill a stage (only
// where K is not a multiple of 8 * 64 * U / 2), unpipelined. RT > 1 loads x once for RT tiles.
template <typename TY, int NT, int U, int RT, bool KB>
__global__ void __launch_bounds__(kWarps * 32, 2) gemv_fp8_stream_kernel(Fp8Params<TY> p) {
  __shared__ float partial[2][RT][kWarps][kRows][8 * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t blocks = (p.n + kRows * RT - 1) / (kRows * RT), last = p.n - 1;
  const __nv_bfloat16* xs[NT];
  x_rows<NT>(p, xs);
  static_assert(kSplitAlign % U == 0);
  const gemv_tile::ChunkRange range = gemv_tile::warp_chunks(p.k, kChunk, warp);
  const int64_t groups = max(int64_t{0}, (range.end_full - range.begin) / U);
  const int64_t first_left = range.begin + groups * U;  // first chunk not in a stage
  // Weight row g (+ 8) of tile rt of a block, at this lane's offset of chunk `ch`.
  auto row = [&](int64_t block, int rt, int half, int64_t ch) {
    return p.w + min(block * kRows * RT + kRows * rt + g + 8 * half, last) * p.k + c * 16 +
           ch * kChunk;
  };
  auto load_stage = [&](int64_t block, int64_t j, uint4(&a)[U][RT], uint4(&b)[U][RT]) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
      const uint8_t* pa = row(block, rt, 0, range.begin + j * U);
      const uint8_t* pb = row(block, rt, 1, range.begin + j * U);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        a[u][rt] = load_stream(pa + u * kChunk);
        b[u][rt] = load_stream(pb + u * kChunk);
      }
    }
  };

  int64_t block = blockIdx.x;
  uint4 a[U][RT], b[U][RT];
  if (groups > 0) load_stage(block, 0, a, b);  // weights: before the wait
  pdl_wait();
  pdl_launch_dependents();
  for (int buf = 0; block < blocks; block += gridDim.x, buf ^= 1) {
    float acc[RT][NT][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int t = 0; t < NT; ++t)
        acc[rt][t][0] = acc[rt][t][1] = acc[rt][t][2] = acc[rt][t][3] = 0.0f;
    const float* srow[RT];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
      srow[rt] = KB ? scale_row(p, block * kRows * RT + kRows * rt) : nullptr;
    for (int64_t j = 0; j < groups; ++j) {
      // The next stage: this block's, else the next block's first (none after the last).
      const bool more = j + 1 < groups;
      const int64_t next_block = more ? block : block + gridDim.x;
      uint4 na[U][RT], nb[U][RT];
      if (more || next_block < blocks) load_stage(next_block, more ? j + 1 : 0, na, nb);
      const int64_t ch = range.begin + j * U;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        uint4 xv[NT][2];
        load_x<NT>(xv, xs, ch + u);
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
          chunk<KB, false, NT>(acc[rt], a[u][rt], b[u][rt], xv, srow[rt], ch + u, p.kb_shift);
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          a[u][rt] = na[u][rt];
          b[u][rt] = nb[u][rt];
        }
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
      const uint8_t* wa = row(block, rt, 0, 0);
      const uint8_t* wb = row(block, rt, 1, 0);
      for (int64_t ch = first_left; ch < range.end; ++ch)
        mma_partial_chunk<KB, NT>(acc[rt], wa, wb, xs, ch, p.k, srow[rt], p.kb_shift);
    }
    // One barrier per row tile: partial[buf] is written again two blocks later, after every
    // thread has passed the next block's barriers, so after it has read this block's sums.
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
      gemv_tile::reduce_warps<NT>(partial[buf][rt], acc[rt], block * kRows * RT + kRows * rt, p.n,
                                  p.m, Store<TY>{p});
  }
}

// The x-in-registers kernel (M <= 16, K <= kXWarps * kXChunks * 64): one CTA of 16 warps per SM
// walks row tiles (16 rows) like the stream kernel, but warp w owns chunks w * kXChunks .. + 3 of
// K for the whole launch, so it loads its x (all tokens, 16 KB per warp at M = 16 and K = 4096)
// into registers once, and no tile reads x again (the stream kernel's x loads are twice its weight
// bytes at M = 16). Weights go global -> shared with cp.async, each lane copying exactly the 16
// bytes it later reads (no barrier for them), one row tile ahead, the first before pdl_wait(). The
// 16 warps' sums meet in a double-buffered shared array (one barrier per tile), in warp order. A
// different split of K than the tile kernel's: results agree with it to rounding, not in bits.
constexpr int kXWarps = 16;
constexpr int kXChunks = 4;
static_assert(int64_t{kXWarps} * kXChunks * kChunk == kFp8RegistersMaxK,
              "the policy's limit (policy/linear_fp8.h)");
// Ring stages of the launched kernel: one row tile ahead. Three (two ahead, 128 KB of shared
// memory at M = 16) measured slower on the H200: draft step 0.825 vs 0.764 ms, bench_linear 1-14%
// slower.
constexpr int kXRing = 2;

// 16 bytes global -> shared, or 16 zero bytes when !in (cp.async's source size 0).
__device__ __forceinline__ void cp_async16_or_zero(void* smem, const void* gmem, bool in) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(in ? 16 : 0)
               : "memory");
}

template <int NT, int S>
struct XregSmem {
  // Weight ring of S tiles: [warp][stage][chunk][row half][lane] (16 bytes each); then the warps'
  // sums.
  static constexpr size_t kRing = size_t{kXWarps} * S * kXChunks * 2 * 32 * sizeof(uint4);
  static constexpr size_t kPartial = size_t{2} * kXWarps * kRows * 8 * NT * sizeof(float);
  static constexpr size_t kBytes = kRing + kPartial;
};

// S: ring stages (S - 1 row tiles in flight ahead of the one computed); launched with kXRing.
template <typename TY, int NT, int S, bool KB>
__global__ void __launch_bounds__(kXWarps * 32, 1) gemv_fp8_xreg_kernel(Fp8Params<TY> p) {
  extern __shared__ uint4 xreg_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t tiles = (p.n + kRows - 1) / kRows, last = p.n - 1;
  uint4* ring = xreg_smem + static_cast<size_t>(warp) * S * kXChunks * 2 * 32 + lane;
  auto slot = [&](int stage, int u, int half) {
    return ring + ((stage * kXChunks + u) * 2 + half) * 32;
  };
  // A lane's 16 elements of chunk u are all inside K or all outside (K % 16 == 0).
  auto inside = [&](int u) { return (warp * kXChunks + u) * int64_t{kChunk} + c * 16 < p.k; };
  auto issue = [&](int64_t tile, int stage) {
#pragma unroll
    for (int u = 0; u < kXChunks; ++u) {
      const bool in = inside(u);
      const int64_t off = in ? (warp * kXChunks + u) * int64_t{kChunk} + c * 16 : 0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = min(tile * kRows + g + 8 * half, last);
        cp_async16_or_zero(slot(stage, u, half), p.w + row * p.k + off, in);
      }
    }
    device::cp_async_commit();
  };
  int64_t tile = blockIdx.x;
#pragma unroll
  for (int j = 0; j < S - 1; ++j) {  // weights: before the wait (an empty group past the end)
    if (tile + j * gridDim.x < tiles) {
      issue(tile + j * gridDim.x, j);
    } else {
      device::cp_async_commit();
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  const __nv_bfloat16* xs[NT];
  x_rows<NT>(p, xs);
  uint4 xr[kXChunks][NT][2];
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < kXChunks; ++u) {
    const bool in = inside(u);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const auto* px = reinterpret_cast<const uint4*>(xs[t] + (warp * kXChunks + u) * kChunk);
      xr[u][t][0] = in ? __ldg(px) : zero;
      xr[u][t][1] = in ? __ldg(px + 1) : zero;
    }
    permute_x<NT>(xr[u]);
  }
  auto* partial = reinterpret_cast<float(*)[kXWarps][kRows][8 * NT]>(
      reinterpret_cast<char*>(xreg_smem) + XregSmem<NT, S>::kRing);
  const Store<TY> out{p};
  const int64_t last_chunk = ceil_div(p.k, int64_t{kChunk}) - 1;  // chunks past K: zero sums
  for (int it = 0; tile < tiles; tile += gridDim.x, ++it) {
    const int stage = it % S, buf = it & 1;
    // Into the stage computed in the previous iteration (this lane's own bytes, read before it
    // passed that iteration's barrier); an empty group past the end keeps the count.
    if (tile + (S - 1) * gridDim.x < tiles) {
      issue(tile + (S - 1) * gridDim.x, (it + S - 1) % S);
    } else {
      device::cp_async_commit();
    }
    device::cp_async_wait<S - 1>();
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    const float* srow = KB ? scale_row(p, tile * kRows) : nullptr;
#pragma unroll
    for (int u = 0; u < kXChunks; ++u)
      chunk<KB, true, NT>(acc, *slot(stage, u, 0), *slot(stage, u, 1), xr[u], srow,
                          min(int64_t{warp * kXChunks + u}, last_chunk), p.kb_shift);
    // partial[buf] is written again two tiles later, after every thread has passed the next
    // tile's barrier, so after it has read this tile's sums.
    gemv_tile::reduce_warps<NT, kXWarps>(partial[buf], acc, tile * kRows, p.n, p.m, out);
  }
}

template <typename TY, int NT, int S, bool KB>
void launch_xreg(const Fp8Params<TY>& p, int sms, cudaStream_t stream) {
  allow_dynamic_smem<&gemv_fp8_xreg_kernel<TY, NT, S, KB>>(XregSmem<NT, S>::kBytes);
  const int64_t tiles = ceil_div(p.n, int64_t{kRows}), slots = sms;
  const auto grid = static_cast<unsigned>(ceil_div(tiles, ceil_div(tiles, slots)));
  launch_pdl(gemv_fp8_xreg_kernel<TY, NT, S, KB>, dim3(grid), dim3(kXWarps * 32),
             XregSmem<NT, S>::kBytes, stream, p);
}

// The stream kernel's grid: as many CTAs as give each the same number of blocks (ceil(blocks /
// ceil(blocks / slots)), slots = 2 per SM), so that no CTA walks one block more than the others.
template <typename TY, int NT, int U, int RT, bool KB>
void launch_stream(const Fp8Params<TY>& p, int sms, cudaStream_t stream) {
  const int64_t blocks = ceil_div(p.n, int64_t{kRows * RT});
  const int64_t slots = 2 * static_cast<int64_t>(sms);
  const auto grid = static_cast<unsigned>(ceil_div(blocks, ceil_div(blocks, slots)));
  launch_pdl(gemv_fp8_stream_kernel<TY, NT, U, RT, KB>, dim3(grid), dim3(kWarps * 32), 0, stream,
             p);
}

// invariant: the kernels whose sums do not depend on M only (Tuning::batch_invariant).
template <typename TY, int NT, bool KB>
void launch(const Fp8Params<TY>& p, const DeviceCaps& caps, bool invariant, cudaStream_t stream) {
  if constexpr (NT <= 2) {  // M <= 16
    switch (choose_linear_fp8(p.m, p.n, p.k, caps, KB || invariant)) {
      case Fp8Kernel::registers:
        return launch_xreg<TY, NT, kXRing, KB>(p, caps.sm_count, stream);
      case Fp8Kernel::stream2_tiles2:
        return launch_stream<TY, NT, 2, 2, KB>(p, caps.sm_count, stream);
      case Fp8Kernel::stream2:
        return launch_stream<TY, NT, 2, 1, KB>(p, caps.sm_count, stream);
      case Fp8Kernel::stream4:
        return launch_stream<TY, NT, 4, 1, KB>(p, caps.sm_count, stream);
      case Fp8Kernel::tile:
        break;
    }
  }
  constexpr int kUnroll = NT <= 2 ? 4 : 2;
  launch_pdl(gemv_fp8_kernel<TY, NT, kUnroll, KB>,
             dim3(static_cast<unsigned>(ceil_div(p.n, int64_t{kRows}))), dim3(kWarps * 32), 0,
             stream, p);
}

template <typename TY, bool KB, int NT = 1>
void launch_tiles(const Fp8Params<TY>& p, const DeviceCaps& caps, bool invariant,
                  cudaStream_t stream) {
  if constexpr (NT <= kMaxTiles) {
    if (p.m <= NT * 8) return launch<TY, NT, KB>(p, caps, invariant, stream);
    launch_tiles<TY, KB, NT * 2>(p, caps, invariant, stream);
  }
}

// One CTA per row: scale = amax / 448 (1 for zeros), codes of w / scale (RNE, saturating).
template <typename T>
__global__ void quantize_rows_kernel(const T* w, uint8_t* w8, float* scale, int64_t k) {
  __shared__ float s_red[32];
  const int64_t row = blockIdx.x;
  const T* src = w + row * k;
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
    amax = fmaxf(amax, fabsf(device::to_float(src[j])));
  amax = device::block_max(amax, s_red);
  const float s = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  if (threadIdx.x == 0) scale[row] = s;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
    w8[row * k + j] = static_cast<uint8_t>(
        __nv_cvt_float_to_fp8(__fdiv_rn(device::to_float(src[j]), s), __NV_SATFINITE, __NV_E4M3));
}

}  // namespace

void quantize_rows_fp8(Context& ctx, const Tensor& w, const Tensor& w8, const Tensor& scale) {
  const int64_t n = w.size(0), k = w.size(1);
  dispatch_float(w.dtype(), [&]<typename T>(TypeTag<T>) {
    quantize_rows_kernel<device_t<T>><<<static_cast<unsigned>(n), 256, 0, stream_of(ctx)>>>(
        device_ptr<T>(w), static_cast<uint8_t*>(w8.data()), static_cast<float*>(scale.data()), k);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

namespace {

// y = x . w^T over launches of 64 rows of x: per-row scales (`scale` [N]) or, when `blocks` is
// given, its block scales.
void run_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const float* scale,
             const WeightMatrix* blocks, const Tensor& bias, const Tensor& y) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, k = xv.cols, n = w8.size(0);
  DSPARK_CHECK_KIND(unsupported,
                    device::is_aligned16(x.data()) && device::is_aligned16(w8.data()) &&
                        (m == 1 || xv.stride % 8 == 0),
                    "linear_fp8 on CUDA: x and w8 must be 16-byte aligned with rows of x a "
                    "multiple of 8 elements apart, got {} and {}",
                    x.describe(), w8.describe());
  const bool has_bias = bias.defined() && bias.numel() > 0;
  const bool invariant = ctx.cuda_tuning().batch_invariant;
  int kb_shift = 0;
  if (blocks)
    while ((int64_t{kChunk} << kb_shift) < blocks->block_k) ++kb_shift;
  dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
    if constexpr (!std::is_same_v<TY, f16>) {
      for (int64_t m0 = 0; m0 < m; m0 += 8 * kMaxTiles) {  // 64 rows of x per launch
        const int64_t rows = std::min<int64_t>(8 * kMaxTiles, m - m0);
        Fp8Params<device_t<TY>> p{static_cast<const uint8_t*>(w8.data()),
                                  scale,
                                  device_ptr<bf16>(x) + m0 * xv.stride,
                                  device_ptr<TY>(y) + m0 * yv.stride,
                                  has_bias ? bias.data() : nullptr,
                                  has_bias ? float_kind(bias.dtype()) : device::FloatKind::f32,
                                  rows,
                                  n,
                                  k,
                                  rows == 1 ? k : xv.stride,
                                  rows == 1 ? n : yv.stride};
        if (blocks) {
          p.block_scale = static_cast<const float*>(blocks->scales.data());
          p.scale_ld = blocks->scales.size(1);
          p.block_n = blocks->block_n;
          p.kb_shift = kb_shift;
          launch_tiles<device_t<TY>, true>(p, ctx.cuda_caps(), invariant, stream_of(ctx));
        } else {
          launch_tiles<device_t<TY>, false>(p, ctx.cuda_caps(), invariant, stream_of(ctx));
        }
      }
    }
  });
}

}  // namespace

void linear_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const Tensor& scale,
                const Tensor& bias, const Tensor& y) {
  run_fp8(ctx, x, w8, static_cast<const float*>(scale.data()), nullptr, bias, y);
}

void linear_fp8_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                       const Tensor& y) {
  run_fp8(ctx, x, w.data, nullptr, &w, bias, y);
}

}  // namespace dspark::cuda
