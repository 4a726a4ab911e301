// The small-M linear kernel (see gemv.h). One warp per output row n: lanes stride over the row's
// K / 8 16-byte chunks (coalesced, 512 bytes per warp per step, unrolled for loads in flight),
// multiply each chunk with the matching chunk of every x row (x is small and stays in L1/L2),
// accumulate in f32, reduce across the warp, add the bias, store.
#include <cstdlib>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"

namespace dspark::cuda {
namespace {

constexpr int kWarps = 8;  // rows per CTA
constexpr int kUnroll = 4;

template <typename TW, typename TY>
struct GemvParams {
  const TW* w;       // [N, K]
  const TW* x;       // [M, K], row stride ldx
  TY* y;             // [M, N], row stride ldy
  const void* bias;  // [N] or null
  device::FloatKind bias_kind;
  int64_t n, k, ldx, ldy;
};

// Weights are read exactly once: stream them past L1 (ld.global.nc with no L1 allocation).
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

template <typename TW>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const TW* e = reinterpret_cast<const TW*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = device::to_float(e[i]);
}

template <typename TW, typename TY, int M>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvParams<TW, TY> p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.n) return;
  const int64_t chunks = p.k / 8;
  const char* wrow = reinterpret_cast<const char*>(p.w + row * p.k);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;

  int64_t c = lane;
  // Main loop: kUnroll chunks per lane in flight.
  for (; c + (kUnroll - 1) * 32 < chunks; c += kUnroll * 32) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = load_stream(wrow + (c + u * 32) * 16);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float wv[8];
      unpack8<TW>(raw[u], wv);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xv[8];
        unpack8<TW>(*reinterpret_cast<const uint4*>(p.x + m * p.ldx + (c + u * 32) * 8), xv);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[m] = fmaf(wv[i], xv[i], acc[m]);
      }
    }
  }
  for (; c < chunks; c += 32) {
    float wv[8];
    unpack8<TW>(load_stream(wrow + c * 16), wv);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[8];
      unpack8<TW>(*reinterpret_cast<const uint4*>(p.x + m * p.ldx + c * 8), xv);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[m] = fmaf(wv[i], xv[i], acc[m]);
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = device::warp_sum(acc[m]);
  if (lane == 0) {
    const float b = p.bias ? device::load_float(p.bias, row, p.bias_kind) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) p.y[m * p.ldy + row] = device::from_float<TY>(acc[m] + b);
  }
}

template <typename TW, typename TY, int M>
void launch(const GemvParams<TW, TY>& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(ceil_div(p.n, kWarps));
  gemv_kernel<TW, TY, M><<<blocks, kWarps * 32, 0, stream>>>(p);
  DSPARK_CUDA_CHECK_LAUNCH();
}

template <typename TW, typename TY, int M = 1>
void launch_rows(int64_t m, const GemvParams<TW, TY>& p, cudaStream_t stream) {
  if constexpr (M <= kGemvMaxRows) {
    if (m == M) return launch<TW, TY, M>(p, stream);
    launch_rows<TW, TY, M + 1>(m, p, stream);
  }
}

// Opt-in (DSPARK_CUDA_GEMV=1): measured on an H200 (2026-11-29, Qwen3-8B shapes) it was slower than
// cuBLASLt at M = 1 (7.45 vs ~6.5 ms per decode step) and much slower at M = 2 (see
// docs/perf-notes.md); kept, tested, for the tuning work.
bool gemv_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("DSPARK_CUDA_GEMV");
    return env && env[0] == '1';
  }();
  return enabled;
}

}  // namespace

bool try_gemv(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  if (!gemv_enabled()) return false;
  if (x.dtype() != w.dtype() || (x.dtype() != DType::bf16 && x.dtype() != DType::f16)) return false;
  if (y.dtype() != DType::f32 && y.dtype() != x.dtype()) return false;
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, k = xv.cols, n = w.size(0);
  if (m < 1 || m > kGemvMaxRows || k % 8 != 0 || n < 1) return false;
  if (!w.is_contiguous() || !device::is_aligned16(w.data()) || !device::is_aligned16(x.data()))
    return false;
  if (m > 1 && (xv.stride % 8) != 0) return false;
  const cudaStream_t stream = stream_of(ctx);
  dispatch_float(x.dtype(), [&]<typename TW>(TypeTag<TW>) {
    if constexpr (!std::is_same_v<TW, float>) {
      dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
        GemvParams<device_t<TW>, device_t<TY>> p{
            device_ptr<TW>(w),
            device_ptr<TW>(x),
            device_ptr<TY>(y),
            bias.defined() && bias.numel() > 0 ? bias.data() : nullptr,
            bias.defined() && bias.numel() > 0 ? float_kind(bias.dtype()) : device::FloatKind::f32,
            n,
            k,
            m == 1 ? k : xv.stride,
            m == 1 ? n : yv.stride};
        launch_rows<device_t<TW>, device_t<TY>>(m, p, stream);
      });
    }
  });
  return true;
}

}  // namespace dspark::cuda
