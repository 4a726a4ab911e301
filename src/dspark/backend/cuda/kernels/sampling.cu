// process_logits, sample and sample_from_probs: one block per row, following the numerics that
// ops/sampling.h spells out step by step (the CPU kernel is the reference), so that both backends
// keep the same token set and draw the same token for the same seed:
//   z = float(logit) / T (NaN -> -inf, +inf -> FLT_MAX); e = exp(z - max z) for top-k survivors;
//   p = float(e / S) with S the double sum of e; top-p by the double sum of larger p; min-p in
//   f32; probs = float(e / S_kept); draws by inverse CDF with double cumulative sums.
// exp is evaluated in double and rounded to f32 (a correctly rounded expf for all but vanishingly
// rare arguments, like glibc's expf), so e agrees with the CPU bit for bit in practice.
//
// No sort: the top-k and top-p cuts are thresholds on order-preserving 32-bit keys of z and p.
// With H(c) = sum of w_i over elements whose key >= c (w = 1 for top-k, w = p for top-p), both
// rules read "keep iff key >= c* - 1" where c* is the smallest c with H(c) < bound (bound = k or
// top_p). c* is found by a 16-way search over [0, 2^32]: each pass evaluates H at 16 candidates
// (per-thread partial sums, then a deterministic block reduction), 9 passes in all.
#include <cfloat>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/inverse_cdf.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/core/philox.h"

namespace dspark::cuda {
namespace {

constexpr int kThreads = device::kDrawThreads;
constexpr int kWays = 16;

// SamplingParams as the device reads them.
struct RowParams {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

template <typename T>
struct SamplingArgs {
  const T* logits;  // [rows, vocab]
  int64_t logits_stride;
  int64_t vocab;
  const RowParams* params;  // [rows] or [1]
  bool one_params;
  float* work;   // per row 2 * vocab floats: e, then p (p is reused for the output of sample)
  float* probs;  // process_logits: [rows, vocab] output
  int64_t probs_stride;
  const uint64_t* seeds;  // sample: [rows]
  const uint64_t* counters;
  int32_t* tokens;  // sample: [rows]
};

struct Shared {
  double d[32 * kWays];
  int i[32 * kWays];
  float f[32];
  device::InverseCdfShared<kThreads> draw;
};

// Order-preserving key of a float (-0 and +0 share a key; NaN is never passed).
__device__ __forceinline__ int64_t order_key(float f) {
  const uint32_t u = __float_as_uint(f + 0.0f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float scaled_logit(float x, float temperature) {
  float z = x / temperature;
  if (z != z) z = -INFINITY;
  if (z > FLT_MAX) z = FLT_MAX;
  return z;
}

__device__ __forceinline__ float exp_f32(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

// Smallest c in [0, 2^32] with H(c) = sum_i w_i [key_i >= c] < bound, for elements i < n given
// by elem(i, key, w). W: int (counts) or double. Every thread returns the same value.
template <typename W, typename Elem>
__device__ int64_t search_cut(int64_t n, double bound, Elem elem, W* s_red) {
  int64_t lo = 0, hi = int64_t{1} << 32;
  while (lo < hi) {
    const int64_t step = (hi - lo + kWays - 1) / kWays;
    W acc[kWays];
#pragma unroll
    for (int j = 0; j < kWays; ++j) acc[j] = W(0);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      int64_t key;
      W w;
      elem(i, key, w);
#pragma unroll
      for (int j = 0; j < kWays; ++j)
        if (key >= lo + j * step) acc[j] += w;
    }
    device::block_sum_n<W, kWays>(acc, s_red);
    int found = -1, last = 0;
#pragma unroll
    for (int j = 0; j < kWays; ++j) {
      if (lo + j * step >= hi) break;
      last = j;
      if (found < 0 && static_cast<double>(acc[j]) < bound) found = j;
    }
    if (found < 0) {
      lo = lo + last * step + 1;
    } else {
      const int64_t new_hi = lo + found * step;
      if (found > 0) lo = lo + (found - 1) * step + 1;
      hi = new_hi;
    }
  }
  return lo;
}

// Argmax of a raw row (ops/softmax.h rules).
template <typename T>
__device__ int32_t row_argmax(const T* x, int64_t n, Shared& sh) {
  float best = NAN;
  int best_i = INT32_MAX;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = device::to_float(x[i]);
    if (device::argmax_better(v, static_cast<int>(i), best, best_i)) {
      best = v;
      best_i = static_cast<int>(i);
    }
  }
  device::block_argmax(best, best_i, sh.f, sh.i);
  return best_i == INT32_MAX ? 0 : best_i;
}

// Writes one-hot(index) into out[0, n).
__device__ void write_one_hot(float* out, int64_t n, int32_t index) {
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = i == index ? 1.0f : 0.0f;
}

template <typename T, bool kSample>
__global__ void __launch_bounds__(kThreads) sampling_kernel(SamplingArgs<T> a) {
  __shared__ Shared sh;
  const int64_t row = blockIdx.x, n = a.vocab;
  const T* x = a.logits + row * a.logits_stride;
  const RowParams P = a.params[a.one_params ? 0 : row];
  float* e_buf = a.work + row * 2 * n;
  float* p_buf = e_buf + n;
  float* out = kSample ? p_buf : a.probs + row * a.probs_stride;

  auto finish_one_hot = [&](int32_t index) {
    if constexpr (kSample) {
      if (threadIdx.x == 0) a.tokens[row] = index;
    } else {
      write_one_hot(out, n, index);
    }
  };
  if (P.temperature <= 0.0f) return finish_one_hot(row_argmax(x, n, sh));

  float z_max = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    z_max = fmaxf(z_max, scaled_logit(device::to_float(x[i]), P.temperature));
  z_max = device::block_max(z_max, sh.f);
  if (z_max == -INFINITY) return finish_one_hot(row_argmax(x, n, sh));

  // top-k: keep z >= the k-th largest z.
  int64_t k_cut = -1;
  if (P.top_k > 0 && P.top_k < n) {
    const float t = P.temperature;
    k_cut = search_cut<int>(
                n, static_cast<double>(P.top_k),
                [&](int64_t i, int64_t& key, int& w) {
                  key = order_key(scaled_logit(device::to_float(x[i]), t));
                  w = 1;
                },
                sh.i) -
            1;
  }
  double sum_e = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float z = scaled_logit(device::to_float(x[i]), P.temperature);
    const float e = order_key(z) >= k_cut ? exp_f32(z - z_max) : 0.0f;
    e_buf[i] = e;
    sum_e += e;
  }
  sum_e = device::block_sum(sum_e, sh.d);

  // top-p: keep p >= the smallest p whose larger values sum (double) to < top_p.
  int64_t p_cut = -1;
  if (P.top_p < 1.0f) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      p_buf[i] = static_cast<float>(e_buf[i] / sum_e);
    p_cut = search_cut<double>(
                n, static_cast<double>(P.top_p),
                [&](int64_t i, int64_t& key, double& w) {
                  const float p = p_buf[i];
                  key = order_key(p);
                  w = p;
                },
                sh.d) -
            1;
  }
  const float p_min = P.min_p > 0.0f ? P.min_p * static_cast<float>(1.0 / sum_e) : 0.0f;

  double sum_kept = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = e_buf[i];
    const float p = static_cast<float>(e / sum_e);
    const float kept = order_key(p) >= p_cut && p >= p_min ? e : 0.0f;
    e_buf[i] = kept;
    sum_kept += kept;
  }
  sum_kept = device::block_sum(sum_kept, sh.d);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    out[i] = static_cast<float>(e_buf[i] / sum_kept);

  if constexpr (kSample) {
    __syncthreads();  // the draw reads entries written by other threads
    const float u = philox_uniform(a.seeds[row], a.counters[row], kLaneSample);
    const int32_t token = device::draw_index(out, n, u, sh.draw);
    if (threadIdx.x == 0) a.tokens[row] = token;
  }
}

struct DrawArgs {
  const float* probs;  // [rows, vocab]
  int64_t probs_stride;
  int64_t vocab;
  const float* uniforms;  // [rows]
  int32_t* tokens;        // [rows]
};

__global__ void __launch_bounds__(kThreads) sample_from_probs_kernel(DrawArgs a) {
  __shared__ Shared sh;
  const int32_t token = device::draw_index(a.probs + blockIdx.x * a.probs_stride, a.vocab,
                                           a.uniforms[blockIdx.x], sh.draw);
  if (threadIdx.x == 0) a.tokens[blockIdx.x] = token;
}

// Uploads params (+ seeds, counters) and reserves the per-row work rows; launches the kernel.
template <bool kSample>
void launch_sampling(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                     std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
                     const Tensor& probs, const Tensor& tokens) {
  const RowView lv = row_view(logits);
  if (lv.rows == 0) return;
  DSPARK_CHECK(lv.cols > 0 && lv.cols < INT32_MAX, "sampling: vocabulary size {}", lv.cols);
  DSPARK_CHECK(params.size() == 1 || static_cast<int64_t>(params.size()) == lv.rows,
               "sampling: {} params for {} rows", params.size(), lv.rows);
  std::vector<RowParams> rows(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    rows[i] = RowParams{params[i].temperature, params[i].top_k, params[i].top_p, params[i].min_p};
  ScratchUpload up;
  const size_t off_params = up.add(std::span<const RowParams>(rows));
  size_t off_seeds = 0, off_counters = 0;
  if constexpr (kSample) {
    off_seeds = up.add(seeds);
    off_counters = up.add(counters);
  }
  const size_t off_work = up.reserve(static_cast<size_t>(lv.rows * 2 * lv.cols) * sizeof(float));
  char* base = up.upload(ctx);
  dispatch_float(logits.dtype(), [&]<typename T>(TypeTag<T>) {
    SamplingArgs<device_t<T>> a{};
    a.logits = device_ptr<T>(logits);
    a.logits_stride = lv.stride;
    a.vocab = lv.cols;
    a.params = reinterpret_cast<const RowParams*>(base + off_params);
    a.one_params = params.size() == 1;
    a.work = reinterpret_cast<float*>(base + off_work);
    if constexpr (kSample) {
      a.seeds = reinterpret_cast<const uint64_t*>(base + off_seeds);
      a.counters = reinterpret_cast<const uint64_t*>(base + off_counters);
      a.tokens = static_cast<int32_t*>(tokens.data());
    } else {
      a.probs = static_cast<float*>(probs.data());
      a.probs_stride = row_view(probs).stride;
    }
    sampling_kernel<device_t<T>, kSample>
        <<<static_cast<unsigned>(lv.rows), kThreads, 0, stream_of(ctx)>>>(a);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs) {
  launch_sampling<false>(ctx, logits, params, {}, {}, probs, Tensor());
}

void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens) {
  launch_sampling<true>(ctx, logits, params, seeds, counters, Tensor(), tokens);
}

void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens) {
  const RowView pv = row_view(probs);
  if (pv.rows == 0) return;
  DSPARK_CHECK(pv.cols > 0 && pv.cols < INT32_MAX, "sample_from_probs: vocabulary size {}",
               pv.cols);
  DrawArgs a{static_cast<const float*>(probs.data()), pv.stride, pv.cols,
             static_cast<const float*>(uniforms.data()), static_cast<int32_t*>(tokens.data())};
  sample_from_probs_kernel<<<static_cast<unsigned>(pv.rows), kThreads, 0, stream_of(ctx)>>>(a);
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace dspark::cuda
