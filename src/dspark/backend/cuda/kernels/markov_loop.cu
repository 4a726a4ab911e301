// Every greedy step of the vanilla Markov head in one launch (contract: ops/head_cells.h,
// markov_greedy_loop). One CTA of 8 warps per multiprocessor at most, all resident at once:
//   - each CTA owns a contiguous slice of w2's columns and copies it into shared memory once
//     (before the PDL wait: weights are written before the forward), rows padded so that 8
//     consecutive threads' 16-byte loads fall into different banks;
//   - per step: e = w1[x_{k-1}] of every row in shared memory as f32; one thread per column
//     computes z[row, j] += w2[j] . e (f32, k in order) and the CTA's best (value, column) per
//     row goes to a per-(step, row, CTA) partial;
//   - a grid barrier (an arrival counter that only grows within the launch), then every CTA
//     merges the partials of each row itself (argmax_better is a total order: the same token in
//     every CTA) and CTA 0 writes the tokens; the last CTA to leave resets the counters.
// The per-step kernel (markov_step.cu) launches S times and re-reads w2 from L2 or memory in
// every step; here w2 is read once per round and a step costs one barrier.
#include <cuda_runtime.h>

#include <atomic>

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
constexpr int kMaxRows = 64;          // rows of one launch (s_tok)
constexpr int kMinColsPerCta = 32;    // fewer CTAs for small vocabularies (cheaper barriers)
constexpr size_t kStaticSmem = 1024;  // headroom for the kernel's static shared memory

template <typename T>
struct LoopParams {
  const T* w1;             // [V, r]
  const T* w2;             // [cols, r]
  int64_t r, rp;           // rank, and rank padded to the vector width
  int64_t cols, cta_cols;  // columns, columns per CTA
  int64_t w_stride;        // elements per row of the shared w2 slice
  size_t e_offset;         // byte offset of e in the dynamic shared memory
  float* z;                // [steps * rows, ldz]
  int64_t ldz;
  int32_t* tokens;     // [(steps + 1) * rows]
  const int32_t* map;  // [cols] or null
  float* part_v;       // [steps, rows, gridDim.x]
  int* part_i;
  unsigned* sync;  // [2]: barrier arrivals, exits (zero between launches)
  int rows, steps;
  bool vec_copy;  // w2 rows 16-byte aligned and r % kVecWidth == 0
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every CTA of the grid has arrived `target` times in total (counts only grow in a launch).
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(count, 1u);
    while (load_acquire(count) < target) __nanosleep(20);
  }
  __syncthreads();
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) markov_loop_kernel(LoopParams<T> p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  __shared__ int s_tok[kMaxRows];
  constexpr int kW = device::kVecWidth<T>;
  T* s_w = reinterpret_cast<T*>(smem);                       // [cta_cols, w_stride]
  float* s_e = reinterpret_cast<float*>(smem + p.e_offset);  // [rows, rp]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned n_ctas = gridDim.x;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * p.cta_cols;
  const int64_t n = max(int64_t{0}, min(p.cta_cols, p.cols - c0));

  // The w2 slice (zeros past r: e is zero there too, and 0 * garbage could be NaN).
  if (p.vec_copy) {
    const int64_t per_row = p.r / kW;
    for (int64_t v = threadIdx.x; v < n * per_row; v += kThreads) {
      const int64_t j = v / per_row, k = (v % per_row) * kW;
      *reinterpret_cast<uint4*>(s_w + j * p.w_stride + k) =
          *reinterpret_cast<const uint4*>(p.w2 + (c0 + j) * p.r + k);
    }
  } else {
    for (int64_t v = threadIdx.x; v < n * p.rp; v += kThreads) {
      const int64_t j = v / p.rp, k = v % p.rp;
      s_w[j * p.w_stride + k] = k < p.r ? p.w2[(c0 + j) * p.r + k] : device::from_float<T>(0.0f);
    }
  }
  pdl_wait();  // the anchors and the base logits come from the kernels before
  pdl_launch_dependents();
  if (threadIdx.x < p.rows) s_tok[threadIdx.x] = p.tokens[threadIdx.x];
  __syncthreads();

  for (int s = 0; s < p.steps; ++s) {
    for (int64_t v = threadIdx.x; v < p.rows * p.rp; v += kThreads) {
      const int64_t i = v / p.rp, k = v % p.rp;
      s_e[v] = k < p.r ? device::to_float(p.w1[static_cast<int64_t>(s_tok[i]) * p.r + k]) : 0.0f;
    }
    __syncthreads();
    for (int i = 0; i < p.rows; ++i) {
      float* z = p.z + (static_cast<int64_t>(s) * p.rows + i) * p.ldz;
      const float* e = s_e + i * p.rp;
      float best = NAN;
      int best_i = INT32_MAX;
      for (int64_t jj = threadIdx.x; jj < n; jj += kThreads) {
        const T* w = s_w + jj * p.w_stride;
        float acc = 0.0f;
        for (int64_t k = 0; k < p.rp; k += kW) {
          float wv[kW];
          device::load_vec(w + k, wv);
#pragma unroll
          for (int t = 0; t < kW; t += 4) {
            const float4 ev = *reinterpret_cast<const float4*>(e + k + t);
            acc = fmaf(wv[t], ev.x, acc);
            acc = fmaf(wv[t + 1], ev.y, acc);
            acc = fmaf(wv[t + 2], ev.z, acc);
            acc = fmaf(wv[t + 3], ev.w, acc);
          }
        }
        const int64_t j = c0 + jj;
        const float val = z[j] + acc;
        z[j] = val;
        if (device::argmax_better(val, static_cast<int>(j), best, best_i)) {
          best = val;
          best_i = static_cast<int>(j);
        }
      }
      device::block_argmax(best, best_i, s_v, s_i);
      if (threadIdx.x == 0) {
        const int64_t at = (static_cast<int64_t>(s) * p.rows + i) * n_ctas + blockIdx.x;
        p.part_v[at] = best;
        p.part_i[at] = best_i;
      }
    }
    grid_barrier(&p.sync[0], static_cast<unsigned>(s + 1) * n_ctas);
    for (int i = warp; i < p.rows; i += kWarps) {
      const int64_t base = (static_cast<int64_t>(s) * p.rows + i) * n_ctas;
      float v = NAN;
      int vi = INT32_MAX;
      for (unsigned c = lane; c < n_ctas; c += 32) {
        const float cv = __ldcg(p.part_v + base + c);
        const int ci = __ldcg(p.part_i + base + c);
        if (device::argmax_better(cv, ci, v, vi)) {
          v = cv;
          vi = ci;
        }
      }
      device::warp_argmax(v, vi);
      if (lane == 0) {
        const int col = vi == INT32_MAX ? 0 : vi;
        const int tok = p.map ? p.map[col] : col;
        s_tok[i] = tok;
        if (blockIdx.x == 0) p.tokens[static_cast<int64_t>(s + 1) * p.rows + i] = tok;
      }
    }
    __syncthreads();
  }
  // Every CTA has passed its last barrier when the exit count reaches n_ctas - 1.
  if (threadIdx.x == 0 && atomicAdd(&p.sync[1], 1u) == n_ctas - 1) {
    p.sync[0] = 0;
    p.sync[1] = 0;
  }
}

// The largest dynamic shared memory one CTA may use on the current device, queried once per
// device; the first call for a device also lets kernel<T> use all of it (so a round's launch
// makes no attribute calls).
template <typename T>
int max_dynamic_smem() {
  constexpr int kCached = 64;
  static std::atomic<int> cache[kCached] = {};  // 0: not asked yet
  const int device = current_device();
  int bytes = device < kCached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (bytes == 0) {
    DSPARK_CUDA_CHECK(
        cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    bytes -= static_cast<int>(kStaticSmem);
    DSPARK_CUDA_CHECK(cudaFuncSetAttribute(markov_loop_kernel<T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    if (device < kCached) cache[device].store(bytes, std::memory_order_relaxed);
  }
  return bytes;
}

}  // namespace

bool markov_greedy_loop(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& tokens,
                        const Tensor& z, int64_t rows, int64_t steps, const Tensor& index_map) {
  static const bool enabled =
      env_switch("DSPARK_MARKOV_FUSED", true) && env_switch("DSPARK_MARKOV_LOOP", true);
  const int64_t cols = z.size(1), r = w2.size(1);
  if (!enabled || w1.dtype() != w2.dtype() || rows < 1 || rows > kMaxRows || steps < 1 ||
      cols >= INT32_MAX || !w1.is_contiguous() || !w2.is_contiguous() || r > 8192)
    return false;
  bool launched = false;
  dispatch_float(w2.dtype(), [&]<typename T>(TypeTag<T>) {
    using D = device_t<T>;
    constexpr int64_t kW = device::kVecWidth<D>;
    const int64_t rp = ceil_div(r, kW) * kW;
    // Row stride of the slice: an odd number of 16-byte units (conflict-free 16-byte loads).
    int64_t w_stride = rp;
    if ((rp / kW) % 2 == 0) w_stride += kW;
    const int64_t n_ctas =
        std::max<int64_t>(1, std::min<int64_t>(sm_count(), ceil_div(cols, kMinColsPerCta)));
    const int64_t cta_cols = ceil_div(cols, n_ctas);
    const size_t w_bytes = static_cast<size_t>(cta_cols * w_stride) * sizeof(D);
    const size_t e_offset = (w_bytes + 15) / 16 * 16;
    const size_t smem = e_offset + static_cast<size_t>(rows * rp) * sizeof(float);
    if (smem > static_cast<size_t>(max_dynamic_smem<D>())) return;  // does not fit
    unsigned* sync = arrival_counters(ctx, ArrivalPool::markov_loop, 2);
    if (sync == nullptr) return;  // first use inside a capture: the per-step kernel
    auto* part_v = static_cast<float*>(
        ctx.scratch(static_cast<size_t>(steps * rows * n_ctas) * (sizeof(float) + sizeof(int))));
    auto* part_i = reinterpret_cast<int*>(part_v + steps * rows * n_ctas);
    const LoopParams<D> p{device_ptr<T>(w1),
                          device_ptr<T>(w2),
                          r,
                          rp,
                          cols,
                          cta_cols,
                          w_stride,
                          e_offset,
                          static_cast<float*>(z.data()),
                          row_view(z).stride,
                          tokens.data_as<int32_t>(),
                          index_map.defined() ? index_map.data_as<int32_t>() : nullptr,
                          part_v,
                          part_i,
                          sync,
                          static_cast<int>(rows),
                          static_cast<int>(steps),
                          r % kW == 0 && device::is_aligned16(w2.data())};
    // At most one CTA per multiprocessor, each fits an idle one: the whole grid becomes
    // resident once the kernels before it finish, which the barrier needs.
    launch_pdl(markov_loop_kernel<D>, dim3(static_cast<unsigned>(n_ctas)), dim3(kThreads), smem,
               stream_of(ctx), p);
    launched = true;
  });
  return launched;
}

}  // namespace dspark::cuda
