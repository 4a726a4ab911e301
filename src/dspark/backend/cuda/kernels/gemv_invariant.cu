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
// At one row this reads each weight byte once like the one-row kernel (gemv_m1.cu), but from one
// CTA per 16 rows rather than a persistent grid; rows beyond 64 read the weights again per launch.
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
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xs[t] = p.x + min(static_cast<int64_t>(g + 8 * t), p.m - 1) * p.ldx + c * 16;

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
  // The rest (a last chunk past K: K % 16 == 0, so a lane's 16 elements are all in or all out).
  for (; ch < range.end; ++ch) {
    const bool in = ch * kChunk + c * 16 < p.k;
    const Lane32 zero{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    Lane32 xv[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) xv[t] = in ? load_x(xs[t] + ch * kChunk) : zero;
    const Lane32 a = in ? load_weights(wa + ch * kChunk) : zero;
    const Lane32 b = in ? load_weights(wb + ch * kChunk) : zero;
    mma_chunk<TW, NT>(acc, a, b, xv);
  }

  gemv_tile::reduce_warps<NT>(partial, acc, row0, p.n, p.m,
                              Store<TY>{p.bias, p.bias_kind, p.y, p.ldy});
}

template <typename TW, typename TY, int NT = 1>
void launch_tiles(const InvariantParams<TW, TY>& p, cudaStream_t stream) {
  if constexpr (NT <= kMaxTiles) {
    if (p.m > NT * 8) return launch_tiles<TW, TY, NT * 2>(p, stream);
    constexpr int kUnroll = NT <= 2 ? 4 : 2;
    launch_pdl(gemv_invariant_kernel<TW, TY, NT, kUnroll>,
               dim3(static_cast<unsigned>(ceil_div(p.n, int64_t{kRows}))), dim3(kWarps * 32), 0,
               stream, p);
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
          launch_tiles(p, stream);
        }
      });
}

}  // namespace dspark::cuda
