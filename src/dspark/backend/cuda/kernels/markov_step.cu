// One greedy step of the vanilla Markov head in one launch (contract: ops/head_cells.h,
// markov_greedy_step). Grid (column chunks, rows); a CTA of 8 warps:
//   - prefetches its w2 rows into L2, waits for the previous kernel (PDL: the previous step wrote
//     the token this step reads), stages e = w1[prev[row]] in shared memory as f32;
//   - one warp per column j: z[row, j] += w2[j, :] . e (f32 sum of lane partials, warp order);
//   - the CTA's best (value, column) goes to scratch; the last CTA of the row to arrive (a
//     per-row arrival counter, reset by that CTA) merges the chunks and writes the token.
// argmax_better is a total order, so the winner does not depend on the split or arrival order.
#include <cuda_runtime.h>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/arrival_counters.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kCols = 64;                       // columns per CTA
constexpr int64_t kMaxRows = int64_t{1} << 14;  // rows the arrival counters cover

template <typename T>
struct StepParams {
  const T* w1;  // [V, r]
  const T* w2;  // [cols, r]
  int64_t r, cols;
  float* z;  // [rows, ldz]
  int64_t ldz;
  const int32_t* prev;  // [rows]
  int32_t* next;        // [rows]
  const int32_t* map;   // [cols] or null
  float* part_v;        // [rows, chunks]
  int* part_i;
  unsigned* counters;  // [rows], zero between launches
  bool vec;            // rows of w1 / w2 16-byte aligned and r % kVecWidth == 0
};

template <typename T>
__global__ void __launch_bounds__(kThreads) markov_step_kernel(StepParams<T> p) {
  extern __shared__ float s_e[];  // [r]
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ bool s_last;
  constexpr int kW = device::kVecWidth<T>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = blockIdx.y;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t c1 = min(c0 + kCols, p.cols);
  // The weights were written before the forward: into L2 while the previous kernel finishes.
  const int64_t row_bytes = p.r * static_cast<int64_t>(sizeof(T));
  for (int64_t j = c0 + warp; j < c1; j += kWarps)
    for (int64_t b = lane * 128; b < row_bytes; b += 32 * 128)
      asm volatile(
          "prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(p.w2 + j * p.r) + b));
  pdl_wait();
  pdl_launch_dependents();

  const T* e = p.w1 + static_cast<int64_t>(p.prev[row]) * p.r;
  for (int64_t k = threadIdx.x; k < p.r; k += kThreads) s_e[k] = device::to_float(e[k]);
  __syncthreads();

  float* z = p.z + row * p.ldz;
  float best = NAN;
  int best_i = INT32_MAX;
  for (int64_t j = c0 + warp; j < c1; j += kWarps) {
    const T* w = p.w2 + j * p.r;
    float acc = 0.0f;
    if (p.vec) {
      for (int64_t k = lane * kW; k < p.r; k += 32 * kW) {
        float v[kW];
        device::load_vec(w + k, v);
#pragma unroll
        for (int i = 0; i < kW; ++i) acc += v[i] * s_e[k + i];
      }
    } else {
      for (int64_t k = lane; k < p.r; k += 32) acc += device::to_float(w[k]) * s_e[k];
    }
    acc = device::warp_sum(acc);
    if (lane == 0) {
      const float v = z[j] + acc;
      z[j] = v;
      if (device::argmax_better(v, static_cast<int>(j), best, best_i)) {
        best = v;
        best_i = static_cast<int>(j);
      }
    }
  }
  device::block_argmax(best, best_i, s_v, s_i);
  const int64_t chunks = gridDim.x;
  if (threadIdx.x == 0) {
    p.part_v[row * chunks + blockIdx.x] = best;
    p.part_i[row * chunks + blockIdx.x] = best_i;
    __threadfence();
    s_last = atomicAdd(&p.counters[row], 1u) == static_cast<unsigned>(chunks - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  float v = NAN;
  int vi = INT32_MAX;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    const float cv = __ldcg(p.part_v + row * chunks + c);
    const int ci = __ldcg(p.part_i + row * chunks + c);
    if (device::argmax_better(cv, ci, v, vi)) {
      v = cv;
      vi = ci;
    }
  }
  device::block_argmax(v, vi, s_v, s_i);
  if (threadIdx.x == 0) {
    const int col = vi == INT32_MAX ? 0 : vi;
    p.next[row] = p.map ? p.map[col] : col;
    p.counters[row] = 0;  // ready for the next launch (kernel boundaries order it)
  }
}

}  // namespace

bool markov_greedy_step(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& prev,
                        const Tensor& z, const Tensor& next, const Tensor& index_map) {
  const int64_t rows = z.size(0), cols = z.size(1), r = w2.size(1);
  if (w1.dtype() != w2.dtype() || rows > kMaxRows || cols >= INT32_MAX || !w1.is_contiguous() ||
      !w2.is_contiguous() || r > 8192)
    return false;
  unsigned* counters =
      arrival_counters(ctx, ArrivalPool::markov_step, static_cast<size_t>(kMaxRows));
  if (counters == nullptr) return false;  // first use inside a capture: the separate ops
  const int64_t chunks = ceil_div(cols, int64_t{kCols});
  auto* part_v = static_cast<float*>(
      ctx.scratch(static_cast<size_t>(rows * chunks) * (sizeof(float) + sizeof(int))));
  auto* part_i = reinterpret_cast<int*>(part_v + rows * chunks);
  dispatch_float(w2.dtype(), [&]<typename T>(TypeTag<T>) {
    using D = device_t<T>;
    constexpr int kW = device::kVecWidth<D>;
    StepParams<D> p{
        device_ptr<T>(w1),
        device_ptr<T>(w2),
        r,
        cols,
        static_cast<float*>(z.data()),
        row_view(z).stride,
        prev.data_as<int32_t>(),
        next.data_as<int32_t>(),
        index_map.defined() ? index_map.data_as<int32_t>() : nullptr,
        part_v,
        part_i,
        counters,
        r % kW == 0 && device::is_aligned16(w1.data()) && device::is_aligned16(w2.data())};
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(rows));
    launch_pdl(markov_step_kernel<D>, grid, dim3(kThreads), static_cast<size_t>(r) * sizeof(float),
               stream_of(ctx), p);
  });
  return true;
}

}  // namespace dspark::cuda
