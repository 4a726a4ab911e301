// FP8 (E4M3) weights with per-row scales (contract: ops/linear_fp8.h): the per-row quantization,
// and y[M, N] = x[M, K] . (e4m3(w8) * scale)^T for bf16 x on tensor cores.
//
// The projection follows gemv.cu (a CTA owns 16 weight rows, the MMA's M - or two such tiles,
// DSPARK_FP8_ROW_TILES=2, at M <= 16; tokens are its N in
// tiles of 8; the CTA's 8 warps split K evenly, by K only) with 64-element chunks: lane
// (g = lane / 4, c = lane % 4) loads 16 bytes (16 codes, physical k = chunk * 64 + c * 16 .. + 15)
// of weight rows g and g + 8, and 32 bytes of each token row g + 8t at the same k. MMA step s
// (0..3) takes the codes' word s: bytes (0, 2) become the bf16 pair of logical k (2c, 2c + 1),
// bytes (1, 3) that of (2c + 8, 2c + 9); the tokens' bf16 pairs are permuted the same way (prmt).
//
// An E4M3 code becomes bf16 exactly with bit moves: sign to bit 15, exponent and mantissa to bits
// 4..10, which reads as the value times 2^-120 (bf16's exponent bias is 127, E4M3's 7; codes with
// a zero exponent land on bf16 subnormals, which are also exact); one bf16 multiply by 2^120
// restores the value, so the MMA sees normal numbers only. NaN codes are never produced.
#include <cuda_fp8.h>

#include <atomic>
#include <cstdlib>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

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
  const uint8_t* w;  // [N, K]
  const float* scale;
  const __nv_bfloat16* x;  // [M, K], row stride ldx
  TY* y;                   // [M, N], row stride ldy
  const void* bias;
  device::FloatKind bias_kind;
  int64_t m, n, k, ldx, ldy;
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

// The four MMA steps of one 64-element chunk: a / b hold weight rows g and g + 8, x[t][0..1] the
// 16 bf16 of token row g + 8t at the same k.
template <int NT>
__device__ __forceinline__ void mma_chunk(float (&acc)[NT][4], const uint4& a, const uint4& b,
                                          const uint4 (&x)[NT][2]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t a0, a1, a2, a3;
    e4m3x4_to_bf16(word(a, s), a0, a2);
    e4m3x4_to_bf16(word(b, s), a1, a3);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint32_t x01 = word(x[t][s / 2], 2 * (s % 2)), x23 = word(x[t][s / 2], 2 * (s % 2) + 1);
      device::mma<__nv_bfloat16>(acc[t], a0, a1, a2, a3, prmt(x01, x23, 0x5410),
                                 prmt(x01, x23, 0x7632));
    }
  }
}

// RT: 16-row tiles per CTA (each warp walks its K range for all of them, loading x once per chunk
// for the RT tiles); NT: token tiles of 8 (M <= 8 * NT); U: chunks in flight per lane.
template <typename TY, int NT, int U, int RT>
__global__ void __launch_bounds__(kWarps * 32) gemv_fp8_kernel(Fp8Params<TY> p) {
  __shared__ float partial[kWarps][kRows * RT][8 * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows * RT;
  const int64_t last = p.n - 1;  // rows past N / tokens past M read a valid row, never stored
  const uint8_t* wa[RT];
  const uint8_t* wb[RT];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt) {
    wa[rt] = p.w + min(row0 + kRows * rt + g, last) * p.k + c * 16;
    wb[rt] = p.w + min(row0 + kRows * rt + g + 8, last) * p.k + c * 16;
  }
  const __nv_bfloat16* xs[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xs[t] = p.x + min(static_cast<int64_t>(g + 8 * t), p.m - 1) * p.ldx + c * 16;

  static_assert(kSplitAlign % U == 0);
  const gemv_tile::ChunkRange range = gemv_tile::warp_chunks(p.k, kChunk, warp);
  const int64_t begin = range.begin, end = range.end, end_full = range.end_full;
  if (c == 0) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) gemv_tile::prefetch_rows(wa[rt], wb[rt], range, kChunk);
  }
  pdl_wait();
  pdl_launch_dependents();

  float acc[RT][NT][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int t = 0; t < NT; ++t)
      acc[rt][t][0] = acc[rt][t][1] = acc[rt][t][2] = acc[rt][t][3] = 0.0f;
  int64_t ch = begin;
  for (; ch + U <= end_full; ch += U) {
    uint4 a[U][RT], b[U][RT], xv[U][NT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        a[u][rt] = load_stream(wa[rt] + (ch + u) * kChunk);
        b[u][rt] = load_stream(wb[rt] + (ch + u) * kChunk);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const auto* px = reinterpret_cast<const uint4*>(xs[t] + (ch + u) * kChunk);
        xv[u][t][0] = __ldg(px);
        xv[u][t][1] = __ldg(px + 1);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) mma_chunk<NT>(acc[rt], a[u][rt], b[u][rt], xv[u]);
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (; ch < end; ++ch) {  // K % 16 == 0: a lane's 16 elements are all inside or all outside
    const bool in = ch * kChunk + c * 16 < p.k;
    uint4 xv[NT][2];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const auto* px = reinterpret_cast<const uint4*>(xs[t] + ch * kChunk);
      xv[t][0] = in ? __ldg(px) : zero;
      xv[t][1] = in ? __ldg(px + 1) : zero;
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
      const uint4 a = in ? load_stream(wa[rt] + ch * kChunk) : zero;
      const uint4 b = in ? load_stream(wb[rt] + ch * kChunk) : zero;
      mma_chunk<NT>(acc[rt], a, b, xv);
    }
  }

  gemv_tile::reduce_warps<NT, RT>(partial, acc, row0, p.n, p.m,
                                  [&](int64_t row, int token, float sum) {
                                    sum *= p.scale[row];
                                    if (p.bias) sum += device::load_float(p.bias, row, p.bias_kind);
                                    p.y[token * p.ldy + row] = device::from_float<TY>(sum);
                                  });
}

// 16-row tiles per CTA for M <= 16 (DSPARK_FP8_ROW_TILES, 1 or 2; read once; set_fp8_row_tiles):
// 2 gives each warp twice the chunks per launch and loads x once for both tiles. The results are
// the same bits either way (each row's sums run in the same order).
std::atomic<int>& row_tiles_flag() {
  static std::atomic<int> flag = [] {
    const char* env = std::getenv("DSPARK_FP8_ROW_TILES");
    return env != nullptr && env[0] == '2' ? 2 : 1;
  }();
  return flag;
}

template <typename TY, int NT>
void launch(const Fp8Params<TY>& p, cudaStream_t stream) {
  if constexpr (NT <= 2) {
    if (row_tiles_flag().load() == 2) {
      const unsigned blocks = static_cast<unsigned>(ceil_div(p.n, int64_t{2 * kRows}));
      launch_pdl(gemv_fp8_kernel<TY, NT, 2, 2>, dim3(blocks), dim3(kWarps * 32), 0, stream, p);
      return;
    }
  }
  constexpr int kUnroll = NT <= 2 ? 4 : 2;
  const unsigned blocks = static_cast<unsigned>(ceil_div(p.n, int64_t{kRows}));
  launch_pdl(gemv_fp8_kernel<TY, NT, kUnroll, 1>, dim3(blocks), dim3(kWarps * 32), 0, stream, p);
}

template <typename TY, int NT = 1>
void launch_tiles(const Fp8Params<TY>& p, cudaStream_t stream) {
  if constexpr (NT <= kMaxTiles) {
    if (p.m <= NT * 8) return launch<TY, NT>(p, stream);
    launch_tiles<TY, NT * 2>(p, stream);
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

void linear_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const Tensor& scale,
                const Tensor& bias, const Tensor& y) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, k = xv.cols, n = w8.size(0);
  DSPARK_CHECK_KIND(unsupported,
                    device::is_aligned16(x.data()) && device::is_aligned16(w8.data()) &&
                        (m == 1 || xv.stride % 8 == 0),
                    "linear_fp8 on CUDA: x and w8 must be 16-byte aligned with rows of x a "
                    "multiple of 8 elements apart, got {} and {}",
                    x.describe(), w8.describe());
  const bool has_bias = bias.defined() && bias.numel() > 0;
  dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
    if constexpr (!std::is_same_v<TY, f16>) {
      for (int64_t m0 = 0; m0 < m; m0 += 8 * kMaxTiles) {  // 64 rows of x per launch
        const int64_t rows = std::min<int64_t>(8 * kMaxTiles, m - m0);
        const Fp8Params<device_t<TY>> p{
            static_cast<const uint8_t*>(w8.data()),
            static_cast<const float*>(scale.data()),
            device_ptr<bf16>(x) + m0 * xv.stride,
            device_ptr<TY>(y) + m0 * yv.stride,
            has_bias ? bias.data() : nullptr,
            has_bias ? float_kind(bias.dtype()) : device::FloatKind::f32,
            rows,
            n,
            k,
            rows == 1 ? k : xv.stride,
            rows == 1 ? n : yv.stride};
        launch_tiles<device_t<TY>>(p, stream_of(ctx));
      }
    }
  });
}

void set_fp8_row_tiles(int tiles) {
  DSPARK_CHECK(tiles == 1 || tiles == 2, "set_fp8_row_tiles: 1 or 2, got {}", tiles);
  row_tiles_flag().store(tiles);
}

}  // namespace dspark::cuda
