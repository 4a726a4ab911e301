// The small-M linear kernel (see gemv.h): y[M, N] = x[M, K] . w[N, K]^T on tensor cores, streaming
// each weight element from memory exactly once.
//
// A CTA owns 16 output rows (one m16 tile of the MMA: weight rows are the MMA's M dimension, the
// tokens its N dimension, padded to 8 * NT) and splits K evenly over its kWarps warps. Each warp
// walks 32-element chunks of K: lane (g = lane / 4, c = lane % 4) loads 16 bytes (8 elements,
// physical k = chunk * 32 + c * 8 .. + 7) of weight rows g and g + 8 and of token rows g + 8t, and
// feeds them to two m16n8k16 MMAs. The MMA sums over k in an order of its own, so the logical k of
// the fragment layout may be any permutation of the physical k as long as A and B use the same one:
// for step s (0, 1) logical k 2c, 2c+1 are physical c * 8 + 4s + {0, 1} and logical 2c+8, 2c+9 are
// c * 8 + 4s + {2, 3}. That turns every fragment load into one coalesced 16-byte load (the four
// lanes of a row read 64 contiguous bytes) with no shared-memory staging and no ldmatrix.
//
// The warps' partial sums meet in shared memory and are added in warp order, then the bias. The
// instruction sequence that produces one token's column does not depend on how many tokens the
// call has (each MMA column is independent, the K split depends on K only), so a row's result is
// bitwise the same at every M <= kGemvMaxRows: a verify batch computes exactly the logits a
// one-token decode step would (batch invariance).
#include <atomic>
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
using gemv_tile::mma_chunk;
using gemv_tile::word;
constexpr int kChunk = 32;  // K elements per chunk (64 bytes per weight row)

template <typename TW, typename TY>
struct GemvParams {
  const TW* w;       // [N, K]
  const TW* x;       // [M, K], row stride ldx
  TY* y;             // [M, N], row stride ldy
  const void* bias;  // [N] or null
  device::FloatKind bias_kind;
  int64_t m, n, k, ldx, ldy;
};

// NT: token tiles of 8 (M <= 8 * NT); U: chunks in flight per lane.
template <typename TW, typename TY, int NT, int U>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvParams<TW, TY> p) {
  __shared__ float partial[kWarps][kRows][8 * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  // Rows past N and tokens past M read a valid row (the last) instead: no branches in the main
  // loop; their results are never stored.
  const int64_t last = p.n - 1;
  const TW* wa = p.w + min(row0 + g, last) * p.k + c * 8;
  const TW* wb = p.w + min(row0 + g + 8, last) * p.k + c * 8;
  const TW* xs[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xs[t] = p.x + min(static_cast<int64_t>(g + 8 * t), p.m - 1) * p.ldx + c * 8;

  // Warp w takes chunks [begin, end), a multiple of kSplitAlign (so of U) per warp. The split
  // depends on K only, never on M or U: that is what keeps the summation order, so the results,
  // the same for every M.
  static_assert(kSplitAlign % U == 0);
  const gemv_tile::ChunkRange range = gemv_tile::warp_chunks(p.k, kChunk, warp);
  const int64_t begin = range.begin, end = range.end, end_full = range.end_full;

  // Launched as a programmatic dependent (pdl.cuh): the first chunks of each row go into L2 while
  // the kernel before still runs; x is only read after pdl_wait().
  if (c == 0) gemv_tile::prefetch_rows(wa, wb, range, kChunk * sizeof(TW));
  pdl_wait();
  pdl_launch_dependents();

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  int64_t ch = begin;
  for (; ch + U <= end_full; ch += U) {
    uint4 a[U], b[U], xv[U][NT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u] = load_stream(wa + (ch + u) * kChunk);
      b[u] = load_stream(wb + (ch + u) * kChunk);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        xv[u][t] = __ldg(reinterpret_cast<const uint4*>(xs[t] + (ch + u) * kChunk));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) mma_chunk<TW, NT>(acc, a[u], b[u], xv[u]);
  }
  // The rest of the warp's range, chunk by chunk; the last chunk of K may be partial (K % 8 == 0:
  // a lane's 8 elements are all inside or all outside).
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (; ch < end; ++ch) {
    const bool in = ch * kChunk + c * 8 < p.k;
    const uint4 a = in ? load_stream(wa + ch * kChunk) : zero;
    const uint4 b = in ? load_stream(wb + ch * kChunk) : zero;
    uint4 xv[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t)
      xv[t] = in ? __ldg(reinterpret_cast<const uint4*>(xs[t] + ch * kChunk)) : zero;
    mma_chunk<TW, NT>(acc, a, b, xv);
  }

  gemv_tile::reduce_warps<NT>(partial, acc, row0, p.n, p.m, [&](int64_t row, int token, float sum) {
    if (p.bias) sum += device::load_float(p.bias, row, p.bias_kind);
    p.y[token * p.ldy + row] = device::from_float<TY>(sum);
  });
}

template <typename TW, typename TY, int NT>
void launch(const GemvParams<TW, TY>& p, cudaStream_t stream) {
  constexpr int kUnroll = NT <= 2 ? 4 : 2;
  const unsigned blocks = static_cast<unsigned>(ceil_div(p.n, kRows));
  launch_pdl(gemv_kernel<TW, TY, NT, kUnroll>, dim3(blocks), dim3(kWarps * 32), 0, stream, p);
}

template <typename TW, typename TY, int NT = 1>
void launch_tiles(int64_t m, const GemvParams<TW, TY>& p, cudaStream_t stream) {
  if constexpr (NT * 8 <= kGemvMaxRows) {
    if (m <= NT * 8) return launch<TW, TY, NT>(p, stream);
    launch_tiles<TW, TY, NT + 1>(m, p, stream);
  }
}

// Off by default (in a real forward it measured slower than cuBLASLt, see docs/perf-notes.md);
// DSPARK_CUDA_GEMV=1 (read once) or set_small_m_linear(true) turns it on.
std::atomic<int>& enabled_flag() {
  static std::atomic<int> flag = env_switch("DSPARK_CUDA_GEMV", false) ? 1 : 0;
  return flag;
}

}  // namespace

void set_small_m_linear(bool enabled) {
  enabled_flag().store(enabled ? 1 : 0);
}

bool small_m_linear_enabled() {
  return enabled_flag().load() != 0;
}

bool try_gemv(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  if (!small_m_linear_enabled() || !gemv_tile::fits_16bit(x, w, y)) return false;
  const gemv_tile::LinearDims d = gemv_tile::linear_dims(x, w, y);
  if (d.m < 1 || d.m > kGemvMaxRows) return false;
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  gemv_tile::dispatch_16bit(x.dtype(), y.dtype(),
                            [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
                              const GemvParams<device_t<TW>, device_t<TY>> p{device_ptr<TW>(w),
                                                                             device_ptr<TW>(x),
                                                                             device_ptr<TY>(y),
                                                                             b.data,
                                                                             b.kind,
                                                                             d.m,
                                                                             d.n,
                                                                             d.k,
                                                                             d.ldx,
                                                                             d.ldy};
                              launch_tiles<device_t<TW>, device_t<TY>>(d.m, p, stream);
                            });
  return true;
}

}  // namespace dspark::cuda
