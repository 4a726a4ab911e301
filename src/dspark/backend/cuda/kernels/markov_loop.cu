// Every greedy step of the vanilla Markov head in one launch (contract: ops/head_cells.h,
// markov_greedy_loop). One CTA of 8 warps per multiprocessor at most, all resident at once:
//   - each CTA owns a contiguous slice of w2's columns and copies it into shared memory once
//     (cp.async, all of a thread's copies in flight at once; before the PDL wait: weights are
//     written before the forward), rows padded so that 8 consecutive threads' 16-byte loads fall
//     into different banks; likewise the tokens of its columns (the map, or the column), and it
//     asks L2 for the w1 rows of those tokens, which the steps gather;
//   - per step: e = w1[x_{k-1}] of every row in shared memory as f32; one thread per column
//     computes z[row, j] += w2[j] . e (f32, four partial sums over k mod 4, each in k order, then
//     (s0 + s1) + (s2 + s3)), and the CTA's best (value, column) per row goes to a per-(step,
//     row, CTA) partial, with the column's token;
//   - a grid barrier (an arrival counter that only grows within the launch), then every CTA
//     merges the partials of each row itself (argmax_better is a total order: the same token in
//     every CTA) and CTA 0 writes the tokens; the last CTA to leave resets the counters.
// The per-step kernel (markov_step.cu) launches S times and re-reads w2 from L2 or memory in
// every step; here w2 is read once per round and a step costs one barrier.
#include <cuda_runtime.h>

#include <atomic>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
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
  size_t map_offset;       // byte offset of the slice's tokens
  float* z;                // [steps * rows, ldz]
  int64_t ldz;
  int32_t* tokens;     // [(steps + 1) * rows]
  const int32_t* map;  // [cols] or null
  float* part_v;       // [steps, rows, gridDim.x]
  int* part_i;         // the column
  int* part_t;         // its token
  unsigned* sync;      // [2]: barrier arrivals, exits (zero between launches)
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
  int* s_map = reinterpret_cast<int*>(smem + p.map_offset);  // [cta_cols]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned n_ctas = gridDim.x;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * p.cta_cols;
  const int64_t n = max(int64_t{0}, min(p.cta_cols, p.cols - c0));

  // The w2 slice (zeros past r: e is zero there too, and 0 * garbage could be NaN).
  if (p.vec_copy) {
    const int64_t per_row = p.r / kW;
    for (int64_t v = threadIdx.x; v < n * per_row; v += kThreads) {
      const int64_t j = v / per_row, k = (v % per_row) * kW;
      device::cp_async16(s_w + j * p.w_stride + k, p.w2 + (c0 + j) * p.r + k);
    }
    device::cp_async_commit();
  } else {
    for (int64_t v = threadIdx.x; v < n * p.rp; v += kThreads) {
      const int64_t j = v / p.rp, k = v % p.rp;
      s_w[j * p.w_stride + k] = k < p.r ? p.w2[(c0 + j) * p.r + k] : device::from_float<T>(0.0f);
    }
  }
  // The slice's tokens, and their w1 rows into L2 (the map, like w1, is written before the
  // forward; w1 rows of the full vocabulary, up to 128 bytes a line).
  const int64_t w1_row_bytes = p.r * static_cast<int64_t>(sizeof(T));
  for (int64_t jj = threadIdx.x; jj < n; jj += kThreads) {
    const int tok = p.map ? p.map[c0 + jj] : static_cast<int>(c0 + jj);
    s_map[jj] = tok;
    const char* row = reinterpret_cast<const char*>(p.w1 + static_cast<int64_t>(tok) * p.r);
    for (int64_t b = 0; b < w1_row_bytes; b += 128)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(row + b));
  }
  device::cp_async_wait<0>();
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
        const int64_t j = c0 + jj;
        const float zj = z[j];  // in flight during the dot
        const T* w = s_w + jj * p.w_stride;
        // Four independent sums (k = 4q + lane of the float4), added at the end: a chain of r
        // dependent FMAs would cost r FMA latencies per step.
        float acc4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t k = 0; k < p.rp; k += kW) {
          float wv[kW];
          device::load_vec(w + k, wv);
#pragma unroll
          for (int t = 0; t < kW; t += 4) {
            const float4 ev = *reinterpret_cast<const float4*>(e + k + t);
            acc4[0] = fmaf(wv[t], ev.x, acc4[0]);
            acc4[1] = fmaf(wv[t + 1], ev.y, acc4[1]);
            acc4[2] = fmaf(wv[t + 2], ev.z, acc4[2]);
            acc4[3] = fmaf(wv[t + 3], ev.w, acc4[3]);
          }
        }
        const float acc = (acc4[0] + acc4[1]) + (acc4[2] + acc4[3]);
        const float val = zj + acc;
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
        p.part_t[at] = best_i == INT32_MAX ? 0 : s_map[best_i - c0];
      }
    }
    grid_barrier(&p.sync[0], static_cast<unsigned>(s + 1) * n_ctas);
    for (int i = warp; i < p.rows; i += kWarps) {
      const int64_t base = (static_cast<int64_t>(s) * p.rows + i) * n_ctas;
      float v = NAN;
      int vi = INT32_MAX, vt = 0;
      for (unsigned c = lane; c < n_ctas; c += 32) {
        const float cv = __ldcg(p.part_v + base + c);
        const int ci = __ldcg(p.part_i + base + c);
        const int ct = __ldcg(p.part_t + base + c);
        if (device::argmax_better(cv, ci, v, vi)) {
          v = cv;
          vi = ci;
          vt = ct;
        }
      }
      const int lane_best = vi;
      device::warp_argmax(v, vi);
      // The winning column is in one CTA's partial: its lane has the token (a column of no CTA,
      // all NaN, falls back to column 0 as before).
      const unsigned holder = __ballot_sync(0xffffffffu, lane_best == vi && vi != INT32_MAX);
      int tok = __shfl_sync(0xffffffffu, vt, holder != 0 ? __ffs(holder) - 1 : 0);
      if (lane == 0) {
        if (holder == 0) tok = p.map ? p.map[0] : 0;
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
  const int64_t cols = z.size(1), r = w2.size(1);
  if (!ctx.cuda_caps().all_sms || w1.dtype() != w2.dtype() || rows < 1 || rows > kMaxRows ||
      steps < 1 || cols >= INT32_MAX || !w1.is_contiguous() || !w2.is_contiguous() || r > 8192)
    return false;
  bool launched = false;
  dispatch_float(w2.dtype(), [&]<typename T>(TypeTag<T>) {
    using D = device_t<T>;
    constexpr int64_t kW = device::kVecWidth<D>;
    const int64_t rp = ceil_div(r, kW) * kW;
    // Row stride of the slice: an odd number of 16-byte units (conflict-free 16-byte loads).
    int64_t w_stride = rp;
    if ((rp / kW) % 2 == 0) w_stride += kW;
    const int64_t n_ctas = std::max<int64_t>(
        1, std::min<int64_t>(ctx.cuda_caps().sm_count, ceil_div(cols, kMinColsPerCta)));
    const int64_t cta_cols = ceil_div(cols, n_ctas);
    const size_t w_bytes = static_cast<size_t>(cta_cols * w_stride) * sizeof(D);
    const size_t e_offset = (w_bytes + 15) / 16 * 16;
    const size_t map_offset = e_offset + static_cast<size_t>(rows * rp) * sizeof(float);
    const size_t smem = map_offset + static_cast<size_t>(cta_cols) * sizeof(int);
    if (smem > static_cast<size_t>(max_dynamic_smem<D>())) return;  // does not fit
    unsigned* sync = arrival_counters(ctx, ArrivalPool::markov_loop, 2);
    if (sync == nullptr) return;  // first use inside a capture: the per-step kernel
    const int64_t n_part = steps * rows * n_ctas;
    auto* part_v = static_cast<float*>(
        ctx.scratch(static_cast<size_t>(n_part) * (sizeof(float) + 2 * sizeof(int))));
    auto* part_i = reinterpret_cast<int*>(part_v + n_part);
    auto* part_t = part_i + n_part;
    const LoopParams<D> p{device_ptr<T>(w1),
                          device_ptr<T>(w2),
                          r,
                          rp,
                          cols,
                          cta_cols,
                          w_stride,
                          e_offset,
                          map_offset,
                          static_cast<float*>(z.data()),
                          row_view(z).stride,
                          tokens.data_as<int32_t>(),
                          index_map.defined() ? index_map.data_as<int32_t>() : nullptr,
                          part_v,
                          part_i,
                          part_t,
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
