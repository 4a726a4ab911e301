// The one-token linear kernel (decode steps; gemv.h, linear_one_row): y[N] = x[K] . w[N, K]^T
// (+ bias) for 16-bit weights, on CUDA cores. linear() takes it for one row of x with N <=
// 65,536 (policy/linear.h; an LM head stays on cuBLASLt, which streams it at the copy bandwidth).
// On the H200 it streams the Qwen3-8B q/k/v, o and down projections at 87-98% of the copy
// bandwidth where cuBLASLt reaches 60-79% (a graphed decode step: 79.7% -> 87.2% of it).
//  - One CTA of 16 warps per multiprocessor (a balanced persistent grid: every CTA walks the same
//    number of row tiles, up to one) walks tiles of RT weight rows: RT = 16 for K <= 4096, 8 for K
//    <= 8192, 4 above (so that a lane has 16 or 12 loads of 16 bytes in flight).
//  - The 16 warps split K: warp w owns 16-byte chunks [w * P, (w + 1) * P) of every row (P =
//    ceil(K / 8 / 16)), lane l chunks l, l + 32, ... of those (CH per lane, at most 4: K <=
//    16,384). So a lane reads the same CH chunks of x for every row: it loads them into registers
//    once, as floats, after pdl_wait().
//  - For N <= Tuning::one_row_half_ctas_max_n (6,144: the q/k/v and o projections of the 8B
//    shapes) and K <= 8,192, CTAs of 8 warps, two per multiprocessor (the other bullets count 16).
//    A 16-warp CTA needs ~62k of the 64k registers of a multiprocessor, so it becomes resident
//    only where no other kernel's CTA is: after a decode attention (128 CTAs of 128 threads), the
//    o projection's CTAs start only as the attention's retire, and their early weight loads do not
//    overlap it. An 8-warp CTA (~30k registers) fits beside an attention CTA. Same products and
//    order within a warp; the warps' sums are added in warp order, so the bits differ from the
//    16-warp kernel's (another split of K over the warps).
//  - The first tile's weights are loaded before pdl_wait() (weights are never written by a
//    forward), and each next tile's right after the current tile's multiply-adds, before the sums
//    are reduced: the loads stay in flight across tiles. Weights stream past L1 (load_stream).
//  - Per row, a lane sums its 8 x CH products in chunk order, the warp adds its lanes with a xor
//    butterfly, and the warps' sums meet in a double-buffered shared array (one barrier per
//    tile) and are added in warp order, then the bias. The order depends on K only: the same bits
//    on every call.
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/policy/linear.h"

namespace dspark::cuda {
namespace {

constexpr int kWarpsM1 = 16, kWarpsHalf = 8;
constexpr int kMaxChunksPerLane = 4;
constexpr int64_t max_k(int warps) {
  return int64_t{warps} * 32 * kMaxChunksPerLane * 8;
}
static_assert(max_k(kWarpsM1) == kOneRowMaxK && max_k(kWarpsHalf) == kOneRowMaxK / 2,
              "the policy's limits (policy/linear.h)");

template <typename TW, typename TY>
struct M1Params {
  const TW* w;       // [N, K]
  const TW* x;       // [K]
  TY* y;             // [N]
  const void* bias;  // [N] or null
  device::FloatKind bias_kind;
  int64_t n, k;
};

// Weight rows per tile for CH chunks per lane: 16 (or 12) 16-byte loads per lane and tile.
template <int CH>
constexpr int rows_per_tile() {
  return CH == 1 ? 16 : CH == 2 ? 8 : 4;
}

// The 8 products of one 16-byte chunk added to s in element order.
template <typename TW>
__device__ __forceinline__ float dot_chunk(const uint4& w, const float (&x)[8], float s) {
  const TW* e = reinterpret_cast<const TW*>(&w);
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(device::to_float(e[i]), x[i], s);
  return s;
}

template <typename TW, typename TY, int CH, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, kWarpsM1 / WARPS) gemv_m1_kernel(M1Params<TW, TY> p) {
  constexpr int RT = rows_per_tile<CH>();
  __shared__ float partial[2][WARPS][RT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t chunks = p.k / 8, per_warp = (chunks + WARPS - 1) / WARPS;
  // The lane's chunks (element offsets into a row); chunks outside the warp's range or K are
  // zero-filled and contribute 0 x 0.
  int64_t col[CH];
  bool in[CH];
#pragma unroll
  for (int i = 0; i < CH; ++i) {
    const int64_t c = lane + 32 * i, chunk = warp * per_warp + c;
    in[i] = c < per_warp && chunk < chunks;
    col[i] = in[i] ? chunk * 8 : 0;
  }
  const int64_t tiles = (p.n + RT - 1) / RT, last = p.n - 1;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 a[RT][CH];
  // Rows past N read the last row instead (never stored).
  auto load_tile = [&](int64_t t) {
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const TW* row = p.w + min(t * RT + r, last) * p.k;
#pragma unroll
      for (int i = 0; i < CH; ++i) a[r][i] = in[i] ? gemv_tile::load_stream(row + col[i]) : zero;
    }
  };
  int64_t tile = blockIdx.x;
  if (tile < tiles) load_tile(tile);  // weights: before the wait
  pdl_wait();
  pdl_launch_dependents();
  float xv[CH][8];
#pragma unroll
  for (int i = 0; i < CH; ++i) {
    if (in[i]) {
      device::load_vec(p.x + col[i], xv[i]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) xv[i][e] = 0.0f;
    }
  }
  for (int it = 0; tile < tiles; tile += gridDim.x, ++it) {
    float acc[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < CH; ++i) s = dot_chunk<TW>(a[r][i], xv[i], s);
      acc[r] = s;
    }
    if (tile + gridDim.x < tiles) load_tile(tile + gridDim.x);  // in flight during the sums
#pragma unroll
    for (int r = 0; r < RT; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    }
    // partial[buf] is written again two tiles later, after every thread has passed the next
    // tile's barrier, so after it has read this tile's sums.
    const int buf = it & 1;
    if (lane < RT) {
#pragma unroll
      for (int r = 0; r < RT; ++r)
        if (lane == r) partial[buf][warp][r] = acc[r];
    }
    __syncthreads();
    if (threadIdx.x < RT) {
      const int64_t row = tile * RT + threadIdx.x;
      if (row < p.n) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += partial[buf][w][threadIdx.x];
        if (p.bias) sum += device::load_float(p.bias, row, p.bias_kind);
        p.y[row] = device::from_float<TY>(sum);
      }
    }
  }
}

template <typename TW, typename TY, int CH, int WARPS>
void launch_m1(const M1Params<TW, TY>& p, int sms, cudaStream_t stream) {
  constexpr int RT = rows_per_tile<CH>();
  const int64_t tiles = ceil_div(p.n, int64_t{RT}), slots = int64_t{sms} * (kWarpsM1 / WARPS);
  // Every CTA walks ceil(tiles / slots) tiles or one fewer.
  const auto grid = static_cast<unsigned>(ceil_div(tiles, ceil_div(tiles, slots)));
  launch_pdl(gemv_m1_kernel<TW, TY, CH, WARPS>, dim3(grid), dim3(WARPS * 32), 0, stream, p);
}

template <typename TW, typename TY, int WARPS>
void launch_m1_chunks(const M1Params<TW, TY>& p, int64_t chunks_per_lane, int sms,
                      cudaStream_t stream) {
  switch (chunks_per_lane) {
    case 1:
      return launch_m1<TW, TY, 1, WARPS>(p, sms, stream);
    case 2:
      return launch_m1<TW, TY, 2, WARPS>(p, sms, stream);
    case 3:
      return launch_m1<TW, TY, 3, WARPS>(p, sms, stream);
    default:
      return launch_m1<TW, TY, 4, WARPS>(p, sms, stream);
  }
}

}  // namespace

LinearShape linear_shape(const Tensor& x, const Tensor& w, const Tensor& y) {
  const RowView xv = row_view(x);
  LinearShape s;
  s.m = xv.rows;
  s.n = w.size(0);
  s.k = xv.cols;
  s.x = x.dtype();
  s.w = w.dtype();
  s.y = y.dtype();
  s.aligned = w.is_contiguous() && device::is_aligned16(w.data()) &&
              device::is_aligned16(x.data()) && (xv.rows <= 1 || xv.stride % 8 == 0);
  return s;
}

void linear_one_row(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Tensor& y, bool half_ctas) {
  const int64_t k = row_view(x).cols, n = w.size(0);
  const int64_t warps = half_ctas ? kWarpsHalf : kWarpsM1;
  const int64_t chunks_per_lane = ceil_div(ceil_div(k / 8, warps), int64_t{32});
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  const int sms = ctx.cuda_caps().sm_count;
  gemv_tile::dispatch_16bit(
      x.dtype(), y.dtype(), [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
        const M1Params<device_t<TW>, device_t<TY>> p{
            device_ptr<TW>(w), device_ptr<TW>(x), device_ptr<TY>(y), b.data, b.kind, n, k};
        if (half_ctas)
          return launch_m1_chunks<device_t<TW>, device_t<TY>, kWarpsHalf>(p, chunks_per_lane, sms,
                                                                          stream);
        launch_m1_chunks<device_t<TW>, device_t<TY>, kWarpsM1>(p, chunks_per_lane, sms, stream);
      });
}

}  // namespace dspark::cuda
