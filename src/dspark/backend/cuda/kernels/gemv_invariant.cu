// The batch-invariant linear for 16-bit weights (gemv.h, linear_invariant; taken for every M when
// Tuning::batch_invariant is set, policy/linear.h): y[M, N] = x[M, K] . w[N, K]^T (+ bias) on
// tensor cores, where the bits of row m of y depend on row m of x and on w only - never on M, nor
// on where the row sits among the others. A decode step (M = 1) and a verify of k drafts (M = k +
// 1, or many requests' rows) then give a token the same bits.
//
// The layout is gemv_fp8.cu's tile kernel with 16-bit weights:
//  - a CTA owns a tile of 16 weight rows (the MMA's M); its 8 warps split K by K alone
//    (gemv_tile::warp_chunks), each summing its 64-element chunks in K order into MMA
//    accumulators; the warps' sums are added in warp order (gemv_tile::reduce_warps);
//  - tokens are the MMA's N, in tiles of 8 (up to 64 rows of x per launch; more rows, more
//    launches). Each token's column goes through the same MMAs with the same weight fragments
//    whatever the other columns hold, so the tiling of the tokens cannot change its bits.
// In a chunk, lane (g = lane / 4, c = lane % 4) loads the 32 bytes (16 elements, physical k =
// chunk * 64 + c * 16 .. + 15) of weight rows g and g + 8 and of token row g + 8t at the same k;
// MMA step s (0..3) takes their words 2s and 2s + 1 as the fragments of logical k (2c, 2c + 1)
// and (2c + 8, 2c + 9): the weights and the tokens pair the same physical k.
//
// Two kernels with this arithmetic in this order (so the same bits): up to 8 rows of x a
// persistent grid streams the row tiles with the next stage's weights in flight across tiles (the
// stream kernel, as gemv_fp8.cu's); above, one CTA per tile (the tile kernel). Rows beyond 64 read
// the weights again per launch.
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

using gemv_tile::kRows;
using gemv_tile::kSplitAlign;
using gemv_tile::kWarps;
using gemv_tile::load_stream;
using gemv_tile::word;
constexpr int kChunk = 64;    // K elements per chunk (128 bytes of a weight row)
constexpr int kMaxTiles = 8;  // token tiles of 8 per launch: 64 rows of x

template <typename TW, typename TY>
struct InvariantParams {
  const TW* w;  // [N, K]
  const TW* x;  // [M, K], row stride ldx
  TY* y;        // [M, N], row stride ldy
  const void* bias;
  device::FloatKind bias_kind;
  int64_t m, n, k, ldx, ldy;
};

// A lane's 32 bytes of one row in one chunk.
struct Lane32 {
  uint4 lo, hi;
};

__device__ __forceinline__ uint32_t word8(const Lane32& v, int i) {
  return i < 4 ? word(v.lo, i) : word(v.hi, i - 4);
}

__device__ __forceinline__ Lane32 load_weights(const void* p) {
  return Lane32{load_stream(p), load_stream(static_cast<const char*>(p) + 16)};
}

__device__ __forceinline__ Lane32 load_x(const void* p) {
  const auto* q = static_cast<const uint4*>(p);
  return Lane32{__ldg(q), __ldg(q + 1)};
}

// The four MMA steps of one chunk: a / b hold weight rows g and g + 8, x[t] token row g + 8t.
template <typename TW, int NT>
__device__ __forceinline__ void mma_chunk(float (&acc)[NT][4], const Lane32& a, const Lane32& b,
                                          const Lane32 (&x)[NT]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t a0 = word8(a, 2 * s), a2 = word8(a, 2 * s + 1);
    const uint32_t a1 = word8(b, 2 * s), a3 = word8(b, 2 * s + 1);
#pragma unroll
    for (int t = 0; t < NT; ++t)
      device::mma<TW>(acc[t], a0, a1, a2, a3, word8(x[t], 2 * s), word8(x[t], 2 * s + 1));
  }
}

// Token row g + 8t of x at this lane's offset (g = lane / 4, c = lane % 4); tokens past M read
// the last row, never stored.
template <int NT, typename TW, typename TY>
__device__ __forceinline__ void x_rows(const InvariantParams<TW, TY>& p, const TW* (&xs)[NT]) {
  const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xs[t] = p.x + min(static_cast<int64_t>(g + 8 * t), p.m - 1) * p.ldx + c * 16;
}

// One chunk that may reach past K (K % 16 == 0, so a lane's 16 elements are all in or all out);
// wa / wb / xs[t] point at the lane's offset of chunk 0.
template <typename TW, int NT>
__device__ __forceinline__ void mma_masked_chunk(float (&acc)[NT][4], const TW* wa, const TW* wb,
                                                 const TW* const (&xs)[NT], int64_t ch, int64_t k) {
  const bool in = ch * kChunk + (threadIdx.x & 3) * 16 < k;
  const Lane32 zero{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
  Lane32 xv[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) xv[t] = in ? load_x(xs[t] + ch * kChunk) : zero;
  const Lane32 a = in ? load_weights(wa + ch * kChunk) : zero;
  const Lane32 b = in ? load_weights(wb + ch * kChunk) : zero;
  mma_chunk<TW, NT>(acc, a, b, xv);
}

template <typename TY>
struct Store {
  const void* bias;
  device::FloatKind bias_kind;
  TY* y;
  int64_t ldy;
  __device__ __forceinline__ void operator()(int64_t row, int token, float sum) const {
    if (bias) sum += device::load_float(bias, row, bias_kind);
    y[token * ldy + row] = device::from_float<TY>(sum);
  }
};

// NT: token tiles of 8 (M <= 8 * NT); U: chunks in flight per lane (the same chunks in the same
// order for every U: U changes the loads' schedule, not the arithmetic).
template <typename TW, typename TY, int NT, int U>
__global__ void __launch_bounds__(kWarps * 32) gemv_invariant_kernel(InvariantParams<TW, TY> p) {
  __shared__ float partial[kWarps][kRows][8 * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t last = p.n - 1;  // rows past N / tokens past M read a valid row, never stored
  const TW* wa = p.w + min(row0 + g, last) * p.k + c * 16;
  const TW* wb = p.w + min(row0 + g + 8, last) * p.k + c * 16;
  const TW* xs[NT];
  x_rows<NT>(p, xs);

  static_assert(kSplitAlign % U == 0);
  const gemv_tile::ChunkRange range = gemv_tile::warp_chunks(p.k, kChunk, warp);
  if (c == 0) gemv_tile::prefetch_rows(wa, wb, range, kChunk * sizeof(TW));
  pdl_wait();
  pdl_launch_dependents();

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
  int64_t ch = range.begin;
  for (; ch + U <= range.end_full; ch += U) {
    Lane32 a[U], b[U], xv[U][NT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u] = load_weights(wa + (ch + u) * kChunk);
      b[u] = load_weights(wb + (ch + u) * kChunk);
#pragma unroll
      for (int t = 0; t < NT; ++t) xv[u][t] = load_x(xs[t] + (ch + u) * kChunk);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) mma_chunk<TW, NT>(acc, a[u], b[u], xv[u]);
  }
  for (; ch < range.end; ++ch) mma_masked_chunk<TW, NT>(acc, wa, wb, xs, ch, p.k);

  gemv_tile::reduce_warps<NT>(partial, acc, row0, p.n, p.m,
                              Store<TY>{p.bias, p.bias_kind, p.y, p.ldy});
}

// The stream kernel: the tile kernel's arithmetic in its order (the same bits) on a persistent
// grid of at most two CTAs per multiprocessor, each walking row tiles blockIdx.x, + gridDim.x, ..
// Stage j of a warp is chunks begin + jU .. + U - 1 of its K range; the weights of the next stage
// (this tile's, else the next tile's first) are loaded before the MMAs of this one, across tiles,
// and the first stage before pdl_wait(), so the loads never wait for a CTA to start, end or sum
// its warps. The chunks of the range that do not fill a stage follow unpipelined, as the tile
// kernel's last chunks do. The warps' sums go through a double-buffered shared array: one
// barrier per tile.
template <typename TW, typename TY, int NT, int U>
__global__ void __launch_bounds__(kWarps * 32, 2)
    gemv_invariant_stream_kernel(InvariantParams<TW, TY> p) {
  __shared__ float partial[2][kWarps][kRows][8 * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t tiles = (p.n + kRows - 1) / kRows, last = p.n - 1;
  const TW* xs[NT];
  x_rows<NT>(p, xs);
  static_assert(kSplitAlign % U == 0);
  const gemv_tile::ChunkRange range = gemv_tile::warp_chunks(p.k, kChunk, warp);
  const int64_t groups = max(int64_t{0}, (range.end_full - range.begin) / U);
  const int64_t first_left = range.begin + groups * U;  // the first chunk not in a stage
  // Weight row g (+ 8) of a tile at this lane's offset of chunk 0.
  auto row = [&](int64_t tile, int half) {
    return p.w + min(tile * kRows + g + 8 * half, last) * p.k + c * 16;
  };
  auto load_stage = [&](int64_t tile, int64_t j, Lane32(&a)[U], Lane32(&b)[U]) {
    const TW* pa = row(tile, 0) + (range.begin + j * U) * kChunk;
    const TW* pb = row(tile, 1) + (range.begin + j * U) * kChunk;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u] = load_weights(pa + u * kChunk);
      b[u] = load_weights(pb + u * kChunk);
    }
  };

  int64_t tile = blockIdx.x;
  Lane32 a[U], b[U];
  if (groups > 0) load_stage(tile, 0, a, b);  // weights: before the wait
  pdl_wait();
  pdl_launch_dependents();
  for (int buf = 0; tile < tiles; tile += gridDim.x, buf ^= 1) {
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    for (int64_t j = 0; j < groups; ++j) {
      const bool more = j + 1 < groups;
      const int64_t next_tile = more ? tile : tile + gridDim.x;
      Lane32 na[U], nb[U];
      if (more || next_tile < tiles) load_stage(next_tile, more ? j + 1 : 0, na, nb);
      const int64_t ch = range.begin + j * U;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        Lane32 xv[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) xv[t] = load_x(xs[t] + (ch + u) * kChunk);
        mma_chunk<TW, NT>(acc, a[u], b[u], xv);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        a[u] = na[u];
        b[u] = nb[u];
      }
    }
    const TW* wa = row(tile, 0);
    const TW* wb = row(tile, 1);
    for (int64_t ch = first_left; ch < range.end; ++ch)
      mma_masked_chunk<TW, NT>(acc, wa, wb, xs, ch, p.k);
    // partial[buf] is written again two tiles later, after every thread has passed the next
    // tile's barrier, so after it has read this tile's sums.
    gemv_tile::reduce_warps<NT>(partial[buf], acc, tile * kRows, p.n, p.m,
                                Store<TY>{p.bias, p.bias_kind, p.y, p.ldy});
  }
}

// Up to 8 rows of x (decode steps, verifies of up to 7 drafts) the stream kernel, in stages of 2
// chunks, on a grid that gives every CTA the same number of tiles (two slots per multiprocessor);
// more rows the tile kernel. Both give the same bits. (Measured on the H200 with the Qwen3-8B
// shape: with 17 rows the stream kernel, in stages of one chunk to stay within the 128 registers
// of two CTAs per multiprocessor, made a verify of 16 drafts 19% slower than the tile kernel.)
template <typename TW, typename TY, int NT = 1>
void launch_tiles(const InvariantParams<TW, TY>& p, int sms, cudaStream_t stream) {
  if constexpr (NT <= kMaxTiles) {
    if (p.m > NT * 8) return launch_tiles<TW, TY, NT * 2>(p, sms, stream);
    if constexpr (NT == 1) {
      const int64_t tiles = ceil_div(p.n, int64_t{kRows}), slots = 2 * int64_t{sms};
      const auto grid = static_cast<unsigned>(ceil_div(tiles, ceil_div(tiles, slots)));
      launch_pdl(gemv_invariant_stream_kernel<TW, TY, 1, 2>, dim3(grid), dim3(kWarps * 32), 0,
                 stream, p);
    } else {
      constexpr int kUnroll = NT <= 2 ? 4 : 2;
      launch_pdl(gemv_invariant_kernel<TW, TY, NT, kUnroll>,
                 dim3(static_cast<unsigned>(ceil_div(p.n, int64_t{kRows}))), dim3(kWarps * 32), 0,
                 stream, p);
    }
  }
}

}  // namespace

void linear_invariant(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& y) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, k = xv.cols, n = w.size(0);
  DSPARK_CHECK_KIND(unsupported, k % 16 == 0,
                    "batch-invariant linear: K {} is not a multiple of 16", k);
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  gemv_tile::dispatch_16bit(
      x.dtype(), y.dtype(), [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
        for (int64_t m0 = 0; m0 < m; m0 += 8 * kMaxTiles) {
          const int64_t rows = std::min<int64_t>(8 * kMaxTiles, m - m0);
          const InvariantParams<device_t<TW>, device_t<TY>> p{device_ptr<TW>(w),
                                                              device_ptr<TW>(x) + m0 * xv.stride,
                                                              device_ptr<TY>(y) + m0 * yv.stride,
                                                              b.data,
                                                              b.kind,
                                                              rows,
                                                              n,
                                                              k,
                                                              rows == 1 ? k : xv.stride,
                                                              rows == 1 ? n : yv.stride};
          launch_tiles(p, ctx.cuda_caps().sm_count, stream);
        }
      });
}

}  // namespace dspark::cuda
