// The one-token linear kernel (decode steps; gemv.h, try_gemv_m1): y[N] = x[K] . w[N, K]^T (+ bias)
// for 16-bit weights, on CUDA cores. The default since session 7 (DSPARK_CUDA_GEMV_M1=0 or
// set_m1_linear(false) for cuBLASLt): on the H200 it streams the Qwen3-8B q/k/v, o and down
// projections at 87-98% of the copy bandwidth where cuBLASLt reaches 60-79%, and moves a graphed
// decode step from 79.7% to 87.2% of it (docs/perf-notes.md, session 7). N > 65,536 (an LM head)
// stays on cuBLASLt, which streams those at ~100% (this kernel: 100%, 5% slower).
//  - One CTA of 16 warps per multiprocessor (a balanced persistent grid: every CTA walks the same
//    number of row tiles, up to one) walks tiles of RT weight rows: RT = 16 for K <= 4096, 8 for K
//    <= 8192, 4 above (so that a lane has 16 or 12 loads of 16 bytes in flight).
//  - The 16 warps split K: warp w owns 16-byte chunks [w * P, (w + 1) * P) of every row (P =
//    ceil(K / 8 / 16)), lane l chunks l, l + 32, ... of those (CH per lane, at most 4: K <=
//    16,384). So a lane reads the same CH chunks of x for every row: it loads them into registers
//    once, as floats, after pdl_wait().
//  - For N <= kM1HalfCtasDefaultMaxN (6,144: the q/k/v and o projections of the 8B shapes; or
//    set_m1_half_ctas_max_n, DSPARK_CUDA_GEMV_M1_HALF_MAX_N) and K <= 8,192, CTAs of 8 warps, two
//    per multiprocessor (the other bullets count 16). A 16-warp CTA needs ~62k of the 64k registers
//    of a multiprocessor, so it becomes resident only where no other kernel's CTA is: after a
//    decode attention (128 CTAs of 128 threads), the o projection's CTAs start only as the
//    attention's retire, and their early weight loads do not overlap it. An 8-warp CTA (~30k
//    registers) fits beside an attention CTA. Same products and order within a warp; the warps'
//    sums are added in warp order, so the bits differ from the 16-warp kernel's (another split of
//    K over the warps). H200, Qwen3-8B shape, graphed decode step at context 1,024 (session 20,
//    one machine): 4.552 ms with 16 warps everywhere, 4.513 with 8 for the o projection, 4.495
//    with 8 for o and q/k/v.
//  - The first tile's weights are loaded before pdl_wait() (weights are never written by a
//    forward), and each next tile's right after the current tile's multiply-adds, before the sums
//    are reduced: the loads stay in flight across tiles. Weights stream past L1 (load_stream).
//  - Per row, a lane sums its 8 x CH products in chunk order, the warp adds its lanes with a xor
//    butterfly, and the 16 warps' sums meet in a double-buffered shared array (one barrier per
//    tile) and are added in warp order, then the bias. The order depends on K only: the same bits
//    on every call.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kWarpsM1 = 16, kWarpsHalf = 8;
constexpr int kMaxChunksPerLane = 4;
constexpr int64_t max_k(int warps) {
  return int64_t{warps} * 32 * kMaxChunksPerLane * 8;
}
constexpr int64_t kMaxK = max_k(kWarpsM1);

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
void launch_m1(const M1Params<TW, TY>& p, cudaStream_t stream) {
  constexpr int RT = rows_per_tile<CH>();
  const int64_t tiles = ceil_div(p.n, int64_t{RT}), slots = sm_count() * (kWarpsM1 / WARPS);
  // Every CTA walks ceil(tiles / slots) tiles or one fewer.
  const auto grid = static_cast<unsigned>(ceil_div(tiles, ceil_div(tiles, slots)));
  launch_pdl(gemv_m1_kernel<TW, TY, CH, WARPS>, dim3(grid), dim3(WARPS * 32), 0, stream, p);
}

template <typename TW, typename TY, int WARPS>
void launch_m1_chunks(const M1Params<TW, TY>& p, int64_t chunks_per_lane, cudaStream_t stream) {
  switch (chunks_per_lane) {
    case 1:
      return launch_m1<TW, TY, 1, WARPS>(p, stream);
    case 2:
      return launch_m1<TW, TY, 2, WARPS>(p, stream);
    case 3:
      return launch_m1<TW, TY, 3, WARPS>(p, stream);
    default:
      return launch_m1<TW, TY, 4, WARPS>(p, stream);
  }
}

// On by default; DSPARK_CUDA_GEMV_M1=0 (read once) or set_m1_linear(false) turns it off.
std::atomic<int>& m1_flag() {
  static std::atomic<int> flag = env_switch("DSPARK_CUDA_GEMV_M1", true) ? 1 : 0;
  return flag;
}

// kM1HalfCtasDefaultMaxN unless DSPARK_CUDA_GEMV_M1_HALF_MAX_N=N (read once; 0: off) or
// set_m1_half_ctas_max_n.
std::atomic<int64_t>& half_max_n_flag() {
  static std::atomic<int64_t> n{
      env_count("DSPARK_CUDA_GEMV_M1_HALF_MAX_N", static_cast<int>(kM1HalfCtasDefaultMaxN))};
  return n;
}

}  // namespace

void set_m1_half_ctas_max_n(int64_t n) {
  half_max_n_flag().store(std::max<int64_t>(n, 0));
}

int64_t m1_half_ctas_max_n() {
  return half_max_n_flag().load();
}

void set_m1_linear(bool enabled) {
  m1_flag().store(enabled ? 1 : 0);
}

bool m1_linear_enabled() {
  return m1_flag().load() != 0;
}

bool try_gemv_m1(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                 const Tensor& y) {
  if (!m1_linear_enabled() || !gemv_tile::fits_16bit(x, w, y)) return false;
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t k = xv.cols, n = w.size(0);
  if (xv.rows != 1 || yv.rows != 1 || k > kMaxK || n > kGemvMaxN) return false;
  const bool half = n <= half_max_n_flag().load() && k <= max_k(kWarpsHalf);
  const int64_t warps = half ? kWarpsHalf : kWarpsM1;
  const int64_t chunks_per_lane = ceil_div(ceil_div(k / 8, warps), int64_t{32});
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  gemv_tile::dispatch_16bit(
      x.dtype(), y.dtype(), [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
        const M1Params<device_t<TW>, device_t<TY>> p{
            device_ptr<TW>(w), device_ptr<TW>(x), device_ptr<TY>(y), b.data, b.kind, n, k};
        if (half)
          return launch_m1_chunks<device_t<TW>, device_t<TY>, kWarpsHalf>(p, chunks_per_lane,
                                                                          stream);
        launch_m1_chunks<device_t<TW>, device_t<TY>, kWarpsM1>(p, chunks_per_lane, stream);
      });
  return true;
}

}  // namespace dspark::cuda
