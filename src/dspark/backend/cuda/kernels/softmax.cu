// softmax, log_softmax and argmax over rows of [n, V]: one block per row (V up to a few hundred
// thousand: each thread strides over the row); argmax of a few long rows spreads each row over
// several blocks. Max in f32, sums of exponentials in double, as the
// CPU kernels; argmax follows ops/softmax.h (ties -> smallest index, NaN only if the row is NaN).
#include <algorithm>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

template <typename T>
struct RowsParams {
  const T* x;  // [rows, cols]
  int64_t x_stride;
  int64_t cols;
  float* out;  // softmax / log_softmax: [rows, cols]
  int64_t out_stride;
  int32_t* index;      // argmax: [rows]
  const int32_t* map;  // argmax: [cols] or null (index -> map[index])
};

template <typename T>
__device__ float row_max(const T* x, int64_t cols, float* s_red) {
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, device::to_float(x[i]));
  return device::block_max(m, s_red);
}

template <typename T, bool kLog>
__global__ void softmax_kernel(RowsParams<T> p) {
  __shared__ float s_max[32];
  __shared__ double s_sum[32];
  const T* x = p.x + blockIdx.x * p.x_stride;
  float* out = p.out + blockIdx.x * p.out_stride;
  const float m = row_max(x, p.cols, s_max);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x)
    sum += expf(device::to_float(x[i]) - m);
  sum = device::block_sum(sum, s_sum);
  if constexpr (kLog) {
    const double log_sum = log(sum);
    for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x)
      out[i] = static_cast<float>(static_cast<double>(device::to_float(x[i])) - m - log_sum);
  } else {
    for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x)
      out[i] = static_cast<float>(expf(device::to_float(x[i]) - m) / sum);
  }
}

__device__ __forceinline__ int32_t mapped(int i, const int32_t* map) {
  return map ? map[i] : i;
}

template <typename T>
__global__ void argmax_kernel(RowsParams<T> p) {
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const T* x = p.x + blockIdx.x * p.x_stride;
  float best = NAN;
  int best_i = INT32_MAX;
  for (int64_t i = threadIdx.x; i < p.cols; i += blockDim.x) {
    const float v = device::to_float(x[i]);
    if (device::argmax_better(v, static_cast<int>(i), best, best_i)) {
      best = v;
      best_i = static_cast<int>(i);
    }
  }
  device::block_argmax(best, best_i, s_v, s_i);
  if (threadIdx.x == 0) p.index[blockIdx.x] = mapped(best_i == INT32_MAX ? 0 : best_i, p.map);
}

// Few long rows (a draft step's or a verify's vocabulary rows): one row is spread over
// ceil(cols / kArgmaxChunk) CTAs, each writing the best (value, index) of its chunk; a warp per row
// then merges the chunks. argmax_better is a total order, so the winner does not depend on how
// the row is split.
constexpr int kArgmaxChunk = 4096;
constexpr int kArgmaxThreads = 256;
constexpr int64_t kArgmaxSplitRows = 256;

template <typename T>
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_chunk_kernel(RowsParams<T> p, float* part_v, int* part_i) {
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const T* x = p.x + blockIdx.y * p.x_stride;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kArgmaxChunk;
  const int64_t hi = min(p.cols, lo + kArgmaxChunk);
  float best = NAN;
  int best_i = INT32_MAX;
#pragma unroll 8
  for (int64_t i = lo + threadIdx.x; i < hi; i += kArgmaxThreads) {
    const float v = device::to_float(x[i]);
    if (device::argmax_better(v, static_cast<int>(i), best, best_i)) {
      best = v;
      best_i = static_cast<int>(i);
    }
  }
  device::block_argmax(best, best_i, s_v, s_i);
  if (threadIdx.x == 0) {
    const int64_t at = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    part_v[at] = best;
    part_i[at] = best_i;
  }
}

__global__ void argmax_merge_kernel(const float* part_v, const int* part_i, int chunks,
                                    int32_t* index, const int32_t* map) {
  float best = NAN;
  int best_i = INT32_MAX;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * chunks;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += 32) {
    const float v = part_v[base + c];
    const int i = part_i[base + c];
    if (device::argmax_better(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  device::warp_argmax(best, best_i);
  if (threadIdx.x == 0) index[blockIdx.x] = mapped(best_i == INT32_MAX ? 0 : best_i, map);
}

int threads_for(int64_t cols) {
  return static_cast<int>(std::clamp<int64_t>(ceil_div(cols, 32 * 4) * 32, 32, 1024));
}

template <bool kLog>
void launch_softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  const RowView xv = row_view(x), ov = row_view(out);
  if (xv.rows == 0 || xv.cols == 0) return;
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    RowsParams<device_t<T>> p{device_ptr<T>(x), xv.stride, xv.cols, static_cast<float*>(out.data()),
                              ov.stride,        nullptr,   nullptr};
    softmax_kernel<device_t<T>, kLog>
        <<<static_cast<unsigned>(xv.rows), threads_for(xv.cols), 0, stream_of(ctx)>>>(p);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  launch_softmax<false>(ctx, x, out);
}

void log_softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  launch_softmax<true>(ctx, x, out);
}

void argmax(Context& ctx, const Tensor& x, const Tensor& out, const Tensor& index_map) {
  const RowView xv = row_view(x);
  if (xv.rows == 0) return;
  DSPARK_CHECK(xv.cols > 0 && xv.cols < INT32_MAX, "argmax: row length {}", xv.cols);
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    RowsParams<device_t<T>> p{device_ptr<T>(x),
                              xv.stride,
                              xv.cols,
                              nullptr,
                              0,
                              static_cast<int32_t*>(out.data()),
                              index_map.defined() ? index_map.data_as<int32_t>() : nullptr};
    const int64_t chunks = ceil_div(xv.cols, int64_t{kArgmaxChunk});
    if (chunks >= 2 && xv.rows <= kArgmaxSplitRows) {
      // Few long rows (a vocabulary): spread each row over chunks, then merge.
      auto* part_v = static_cast<float*>(
          ctx.scratch(static_cast<size_t>(xv.rows * chunks) * (sizeof(float) + sizeof(int))));
      auto* part_i = reinterpret_cast<int*>(part_v + xv.rows * chunks);
      const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(xv.rows));
      argmax_chunk_kernel<<<grid, kArgmaxThreads, 0, stream_of(ctx)>>>(p, part_v, part_i);
      DSPARK_CUDA_CHECK_LAUNCH();
      argmax_merge_kernel<<<static_cast<unsigned>(xv.rows), 32, 0, stream_of(ctx)>>>(
          part_v, part_i, static_cast<int>(chunks), p.index, p.map);
      DSPARK_CUDA_CHECK_LAUNCH();
      return;
    }
    argmax_kernel<<<static_cast<unsigned>(xv.rows), threads_for(xv.cols), 0, stream_of(ctx)>>>(p);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dspark::cuda
