// The few-rows linear kernel (verify steps; gemv.h, try_gemv_rows): y[M, N] = x[M, K] . w[N, K]^T
// (+ bias) for 1-32 rows of x (one row takes gemv_m1.cu first while that is on) and 16-bit
// weights, on tensor cores, with the one-row kernel's streaming structure (gemv_m1.cu) instead of
// the small-M kernel's (gemv.cu: a CTA per 16 rows that reads x again for every chunk, 63-75% of
// the copy bandwidth). Opt-in: on the H200 it streams at 76-84% of the copy bandwidth at M = 1 but
// only 47-71% at M = 16-17, slower than cuBLASLt (docs/perf-notes.md, session 7); in the graphed
// round even for the o projection alone, with x read from global memory (session 11: verify of 16
// drafts 5.55 against 5.34 ms). Kept, with its tests, for a profiler session.
//  - One CTA of 16 warps per multiprocessor. After pdl_wait() it copies x, all M rows, into
//    shared memory once (rows padded so that rows g and g + 1 fall in different bank halves); a
//    call whose x does not fit goes to cuBLASLt. (Session 7 also split K over thread-block
//    clusters of 2-8 CTAs merged through distributed shared memory: slower at every shape, 18-111
//    us against 17-68 without at M = 17, so that path was removed; docs/perf-notes.md.)
//  - The 16 warps form 16 / WK row groups of 16 weight rows (one m16 MMA tile) x WK K-splits; a
//    tile is 16 * 16 / WK weight rows. Warp (group, split) owns P <= 8 consecutive chunks of 32
//    elements of K (so K <= 16 * 8 * 32 = 4096); lane (g = lane / 4, c = lane % 4) loads 16 bytes
//    of weight rows g and g + 8 per chunk (gemv.cu's k permutation: no staging, no ldmatrix) and
//    reads the matching 16 bytes of x for tokens g + 8t from shared memory.
//  - The CTAs walk the tiles (a balanced persistent grid: every CTA walks the same number of
//    tiles, up to one). A tile's weights are loaded into registers ahead of its MMAs: the first
//    tile's before pdl_wait() (weights are never written by a forward), and each chunk's registers
//    are refilled with the next tile's chunk right after its MMAs, so the loads overlap the MMAs
//    and stay in flight across the reduction.
//  - Per tile the WK warps of a row group meet in a double-buffered shared array (one barrier per
//    tile) and are added in split order, then the bias.
// The summation order depends on (K, WK) only, not on the call: the same bits on every call.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

using gemv_tile::load_stream;
using gemv_tile::mma_chunk;

constexpr int kWarpsR = 16;
constexpr int kThreadsR = kWarpsR * 32;
constexpr int kChunkR = 32;           // K elements per chunk (four lanes x 8)
constexpr int kMaxChunksPerWarp = 8;  // P: 16 loads of 16 bytes per lane and tile
constexpr int kMaxTokenTiles = kGemvRowsMaxRows / 8;

template <typename TW, typename TY>
struct RowsParams {
  const TW* w;       // [N, K]
  const TW* x;       // [M, K], row stride ldx
  TY* y;             // [M, N], row stride ldy
  const void* bias;  // [N] or null
  device::FloatKind bias_kind;
  int64_t m, n, k, ldx, ldy;
  int k_warps;          // WK: warps per row group, splitting K
  int chunks_per_warp;  // P
  int x_ld;             // elements per row of x in shared memory
  int64_t x_bytes;      // shared memory of x, a multiple of 16
  int64_t tiles;        // tiles of 16 * 16 / WK weight rows
};

template <int NT>
constexpr int64_t partial_floats() {
  return int64_t{2} * kWarpsR * 16 * 8 * NT;  // two buffers x warps x 16 rows x tokens
}

// XG: x read from global memory (L1) in the MMA loop instead of staged in shared memory
// (set_rows_linear_x_global; a measurement switch).
template <typename TW, typename TY, int NT, bool XG>
__global__ void __launch_bounds__(kThreadsR, 1) gemv_rows_kernel(RowsParams<TW, TY> p) {
  extern __shared__ __align__(16) unsigned char smem[];
  TW* sx = reinterpret_cast<TW*>(smem);
  float* spart = reinterpret_cast<float*>(smem + p.x_bytes);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int wk = p.k_warps, group = warp / wk, split = warp % wk;
  const int rows_per_tile = 16 * (kWarpsR / wk), P = p.chunks_per_warp;
  const int64_t ctas = gridDim.x;
  const int64_t warp_chunk0 = int64_t{split} * P;
  // Lane chunk i: inside the warp's share and K (K % 8 == 0: a lane's 8 elements are all inside
  // or all outside); outside, its weights and x are zeros (never read).
  bool in[kMaxChunksPerWarp];
#pragma unroll
  for (int i = 0; i < kMaxChunksPerWarp; ++i) {
    const int64_t ch = warp_chunk0 + i;
    in[i] = i < P && ch * kChunkR + c * 8 < p.k;
  }
  const int64_t last = p.n - 1;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 wa[kMaxChunksPerWarp], wb[kMaxChunksPerWarp];  // weight rows g and g + 8
  // The lane's first element of weight row g (+ 8) of tile t; rows past N read the last row.
  auto tile_row = [&](int64_t t, int r8) {
    const int64_t row = min(t * rows_per_tile + group * 16 + g + r8, last);
    return p.w + row * p.k + warp_chunk0 * kChunkR + c * 8;
  };
  int64_t tile = blockIdx.x;
  if (tile < p.tiles) {  // the first tile's weights: before the wait
    const TW* ra = tile_row(tile, 0);
    const TW* rb = tile_row(tile, 8);
#pragma unroll
    for (int i = 0; i < kMaxChunksPerWarp; ++i) {
      wa[i] = in[i] ? load_stream(ra + i * kChunkR) : zero;
      wb[i] = in[i] ? load_stream(rb + i * kChunkR) : zero;
    }
  }
  pdl_wait();
  pdl_launch_dependents();

  // x, every row, into shared memory.
  if constexpr (!XG) {
    const int64_t vecs = p.k / 8;
    for (int64_t v = threadIdx.x; v < p.m * vecs; v += kThreadsR) {
      const int64_t r = v / vecs, q = v % vecs;
      *reinterpret_cast<uint4*>(sx + r * p.x_ld + q * 8) =
          __ldg(reinterpret_cast<const uint4*>(p.x + r * p.ldx + q * 8));
    }
    __syncthreads();
  }
  // Token row of x for token tile t, at the warp's first chunk (tokens past M read row M - 1;
  // never stored).
  const TW* xrow[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int64_t token = min(int64_t{g + 8 * t}, p.m - 1);
    xrow[t] = XG ? p.x + token * p.ldx + warp_chunk0 * kChunkR + c * 8
                 : sx + token * p.x_ld + warp_chunk0 * kChunkR + c * 8;
  }

  for (int64_t j = 0; tile < p.tiles; tile += ctas, ++j) {
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    // Each chunk's registers are refilled with the next tile's weights as soon as its MMAs have
    // read them: the next tile's loads go out while this tile's MMAs run, and are all in flight
    // during the reduction (loading them after the last MMA left the memory idle during the MMAs:
    // 68 us instead of cuBLASLt's 50 on 24576 x 4096 at M = 17, session 7 call 2).
    const bool more = tile + ctas < p.tiles;  // warp-uniform
    const TW* na = tile_row(tile + ctas, 0);
    const TW* nb = tile_row(tile + ctas, 8);
#pragma unroll
    for (int i = 0; i < kMaxChunksPerWarp; ++i) {
      if (i < P) {  // warp-uniform
        uint4 xv[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t)
          xv[t] = !in[i] ? zero
                  : XG   ? __ldg(reinterpret_cast<const uint4*>(xrow[t] + i * kChunkR))
                         : *reinterpret_cast<const uint4*>(xrow[t] + i * kChunkR);
        mma_chunk<TW, NT>(acc, wa[i], wb[i], xv);
        if (more) {
          wa[i] = in[i] ? load_stream(na + i * kChunkR) : zero;
          wb[i] = in[i] ? load_stream(nb + i * kChunkR) : zero;
        }
      }
    }

    // part[buf] is written again two tiles later, after every thread has passed the next tile's
    // barrier, so after it has read this tile's sums.
    float* part = spart + (j & 1) * (partial_floats<NT>() / 2);  // [warp][16][8 * NT]
    float* mine = part + warp * 16 * 8 * NT;
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      mine[g * 8 * NT + 8 * t + 2 * c] = acc[t][0];
      mine[g * 8 * NT + 8 * t + 2 * c + 1] = acc[t][1];
      mine[(g + 8) * 8 * NT + 8 * t + 2 * c] = acc[t][2];
      mine[(g + 8) * 8 * NT + 8 * t + 2 * c + 1] = acc[t][3];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows_per_tile * p.m; e += kThreadsR) {
      const int r = e % rows_per_tile, token = e / rows_per_tile;
      const int rg = r / 16, rr = r % 16;
      float sum = 0.0f;
      for (int q = 0; q < wk; ++q) sum += part[((rg * wk + q) * 16 + rr) * 8 * NT + token];
      const int64_t row = tile * rows_per_tile + r;
      if (row < p.n) {
        if (p.bias) sum += device::load_float(p.bias, row, p.bias_kind);
        p.y[token * p.ldy + row] = device::from_float<TY>(sum);
      }
    }
  }
}

// The launch shape of one call: K-warps and the derived sizes; chosen on the host.
struct RowsPlan {
  int k_warps = 0, chunks_per_warp = 0, x_ld = 0;
  int64_t x_bytes = 0, tiles = 0;
};

int64_t smem_optin() {  // a cheap attribute query
  int v = 0;
  DSPARK_CUDA_CHECK(
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()));
  return int64_t{v};
}

// 1: x read from global memory in the MMA loop (DSPARK_CUDA_GEMV_ROWS_X=global); 0: staged in
// shared memory (the default).
std::atomic<int>& x_global_setting() {
  static std::atomic<int> v = [] {
    const char* s = std::getenv("DSPARK_CUDA_GEMV_ROWS_X");
    return s && std::strcmp(s, "global") == 0 ? 1 : 0;
  }();
  return v;
}

bool plan_rows(int64_t m, int64_t n, int64_t k, bool x_global, RowsPlan& plan) {
  const int64_t chunks = ceil_div(k, int64_t{kChunkR});
  // Rows of x 64 bytes apart modulo 128: lanes g and g + 1 read different bank halves.
  const int64_t x_ld = chunks * kChunkR + (chunks % 2 == 0 ? kChunkR : 0);
  const int64_t x_bytes = x_global ? 0 : ceil_div(m * x_ld * 2, int64_t{16}) * 16;
  for (int wk : {4, 8, 16}) {  // fewest K-warps first: the most loads in flight per lane
    const int64_t per_warp = ceil_div(chunks, int64_t{wk});
    if (per_warp > kMaxChunksPerWarp) continue;
    plan = RowsPlan{wk, static_cast<int>(per_warp), static_cast<int>(x_ld), x_bytes,
                    ceil_div(n, int64_t{16} * (kWarpsR / wk))};
    return true;
  }
  return false;  // K > 4096
}

template <typename TW, typename TY, int NT, bool XG>
bool launch_rows(RowsParams<TW, TY> p, const RowsPlan& plan, cudaStream_t stream) {
  constexpr auto* kernel = gemv_rows_kernel<TW, TY, NT, XG>;
  const int64_t optin = smem_optin();
  const int64_t smem = plan.x_bytes + partial_floats<NT>() * 4;
  if (smem > optin) return false;  // x does not fit: cuBLASLt
  allow_dynamic_smem<kernel>(static_cast<size_t>(optin));
  // Every CTA walks ceil(tiles / SMs) tiles or one fewer.
  const int64_t ctas = ceil_div(plan.tiles, ceil_div(plan.tiles, int64_t{sm_count()}));
  p.k_warps = plan.k_warps;
  p.chunks_per_warp = plan.chunks_per_warp;
  p.x_ld = plan.x_ld;
  p.x_bytes = plan.x_bytes;
  p.tiles = plan.tiles;
  launch_pdl(kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreadsR), static_cast<size_t>(smem),
             stream, p);
  return true;
}

template <typename TW, typename TY, int NT = 1>
bool launch_rows_tiles(int64_t m, const RowsParams<TW, TY>& p, cudaStream_t stream) {
  if constexpr (NT <= kMaxTokenTiles) {
    if (m <= NT * 8) {
      RowsPlan plan;
      const bool x_global = x_global_setting().load() != 0;
      if (!plan_rows(m, p.n, p.k, x_global, plan)) return false;
      return x_global ? launch_rows<TW, TY, NT, true>(p, plan, stream)
                      : launch_rows<TW, TY, NT, false>(p, plan, stream);
    }
    return launch_rows_tiles<TW, TY, NT + 1>(m, p, stream);
  }
  return false;
}

// Off by default (slower than cuBLASLt at M = 16-17 on the H200, session 7);
// DSPARK_CUDA_GEMV_ROWS=1 (read once) or set_rows_linear(true) turns it on.
std::atomic<int>& rows_flag() {
  static std::atomic<int> flag = env_switch("DSPARK_CUDA_GEMV_ROWS", false) ? 1 : 0;
  return flag;
}

// The widest N the kernel takes (DSPARK_CUDA_GEMV_ROWS_MAX_N, read once; default kGemvMaxN):
// wider calls go to cuBLASLt, e.g. 6144 keeps q/k/v and o and leaves gate/up to cuBLASLt.
int64_t rows_max_n() {
  static const int64_t v = [] {
    const char* s = std::getenv("DSPARK_CUDA_GEMV_ROWS_MAX_N");
    return s != nullptr && *s != '\0' ? std::clamp<int64_t>(std::atoll(s), 1, kGemvMaxN)
                                      : kGemvMaxN;
  }();
  return v;
}

}  // namespace

void set_rows_linear(bool enabled) {
  rows_flag().store(enabled ? 1 : 0);
}

bool rows_linear_enabled() {
  return rows_flag().load() != 0;
}

void set_rows_linear_x_global(bool enabled) {
  x_global_setting().store(enabled ? 1 : 0);
}

bool rows_linear_x_global() {
  return x_global_setting().load() != 0;
}

bool try_gemv_rows(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Tensor& y) {
  if (!rows_linear_enabled() || !gemv_tile::fits_16bit(x, w, y)) return false;
  const gemv_tile::LinearDims d = gemv_tile::linear_dims(x, w, y);
  if (d.m < 1 || d.m > kGemvRowsMaxRows || d.n > rows_max_n()) return false;
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  bool launched = false;
  gemv_tile::dispatch_16bit(
      x.dtype(), y.dtype(), [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
        // The launch fields (k_warps .. tiles) are set by launch_rows.
        RowsParams<device_t<TW>, device_t<TY>> p{};
        p.w = device_ptr<TW>(w);
        p.x = device_ptr<TW>(x);
        p.y = device_ptr<TY>(y);
        p.bias = b.data;
        p.bias_kind = b.kind;
        p.m = d.m;
        p.n = d.n;
        p.k = d.k;
        p.ldx = d.ldx;
        p.ldy = d.ldy;
        launched = launch_rows_tiles<device_t<TW>, device_t<TY>>(d.m, p, stream);
      });
  return launched;
}

}  // namespace dspark::cuda
