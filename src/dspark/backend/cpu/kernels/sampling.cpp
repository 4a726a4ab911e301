// CPU kernels of process_logits, sample and sample_from_probs (contract and numerics:
// ops/sampling.h). One row per task. The top-k and top-p thresholds are found by selection:
// nth_element for the k-th largest scaled logit, and for top-p a sort of the largest
// kTopPCandidates probabilities, 8x more per round while the nucleus is larger.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <functional>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/inverse_cdf.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/philox.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kTopPCandidates = 1024;

// Walks probabilities sorted in descending order, group of equal values by group, and returns
// {the smallest kept value, the index where the first removed group starts (== n when none is)}.
// A group is kept iff the (double) sum of all larger values is < top_p.
std::pair<float, int64_t> top_p_walk(const float* sorted, int64_t n, double top_p) {
  double cum = 0.0;
  float threshold = sorted[0];
  int64_t i = 0;
  while (i < n) {
    if (cum >= top_p) break;
    const float v = sorted[i];
    threshold = v;
    while (i < n && sorted[i] == v) {
      cum += v;
      ++i;
    }
  }
  return {threshold, i};
}

// The top-p threshold over the positive probabilities p(x) = float(e(x) / sum_e).
float top_p_threshold(const float* e, int64_t v, double sum_e, float top_p, float* work) {
  int64_t n = 0;
  for (int64_t i = 0; i < v; ++i) {
    const float p = static_cast<float>(e[i] / sum_e);
    if (p > 0.0f) work[n++] = p;
  }
  if (n == 0) return 0.0f;
  // The largest `c` values first, c growing 8x per round; a round decides when the walk stops
  // inside them (a tie group at the boundary may continue outside, so reaching the boundary
  // means "not decided").
  for (int64_t c = kTopPCandidates; c < n; c *= 8) {
    std::nth_element(work, work + c - 1, work + n, std::greater<float>());
    std::sort(work, work + c, std::greater<float>());
    const auto [threshold, stop] = top_p_walk(work, c, top_p);
    if (stop < c) return threshold;
  }
  std::sort(work, work + n, std::greater<float>());
  return top_p_walk(work, n, top_p).first;
}

// One non-greedy row: `z` holds the logits as f32 on entry (clobbered); writes the processed
// distribution into `probs` (v floats). `raw` reloads the row (for the all -inf fallback).
template <typename T>
void process_row(const T* raw, float* z, int64_t v, const SamplingParams& sp, float* probs,
                 float* work) {
  load_f32(raw, z, v);
  float z_max = -INFINITY;
  for (int64_t i = 0; i < v; ++i) {
    float t = z[i] / sp.temperature;
    if (t != t) t = -INFINITY;     // NaN: probability 0
    if (t > FLT_MAX) t = FLT_MAX;  // +inf (or overflow): the largest logit
    z[i] = t;
    z_max = std::max(z_max, t);
  }
  if (z_max == -INFINITY) {  // nothing has positive probability: one-hot(argmax)
    load_f32(raw, z, v);
    std::fill(probs, probs + v, 0.0f);
    probs[argmax_f32(z, v)] = 1.0f;
    return;
  }
  // top-k: keep z >= the k-th largest value (ties kept together).
  float z_min_kept = -INFINITY;
  if (sp.top_k > 0 && sp.top_k < v) {
    std::copy(z, z + v, work);
    std::nth_element(work, work + (sp.top_k - 1), work + v, std::greater<float>());
    z_min_kept = work[sp.top_k - 1];
  }
  double sum_e = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    const float e = z[i] >= z_min_kept ? std::exp(z[i] - z_max) : 0.0f;
    probs[i] = e;
    sum_e += e;
  }
  float p_min_kept = 0.0f;
  if (sp.top_p < 1.0f) p_min_kept = top_p_threshold(probs, v, sum_e, sp.top_p, work);
  if (sp.min_p > 0.0f) {
    const float p_max = static_cast<float>(1.0 / sum_e);  // e(argmax) = expf(0) = 1
    p_min_kept = std::max(p_min_kept, sp.min_p * p_max);
  }
  double sum_kept = 0.0;
  for (int64_t i = 0; i < v; ++i) {
    const bool kept = z[i] >= z_min_kept && static_cast<float>(probs[i] / sum_e) >= p_min_kept;
    if (!kept) probs[i] = 0.0f;
    sum_kept += probs[i];
  }
  for (int64_t i = 0; i < v; ++i) probs[i] = static_cast<float>(probs[i] / sum_kept);
}

const SamplingParams& params_of(std::span<const SamplingParams> params, int64_t r) {
  return params[params.size() == 1 ? 0 : static_cast<size_t>(r)];
}

}  // namespace

void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs) {
  const int64_t n = logits.size(0), v = logits.size(1);
  dispatch_float(logits.dtype(), [&]<typename T>(TypeTag<T>) {
    ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      float* z = thread_scratch(v, 0);
      float* work = thread_scratch(v, 1);
      for (int64_t r = begin; r < end; ++r) {
        const SamplingParams& sp = params_of(params, r);
        const T* raw = row_ptr<const T>(logits, r);
        float* out = row_ptr<float>(probs, r);
        if (sp.greedy()) {
          load_f32(raw, z, v);
          std::fill(out, out + v, 0.0f);
          out[argmax_f32(z, v)] = 1.0f;
        } else {
          process_row(raw, z, v, sp, out, work);
        }
      }
    });
  });
}

void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens) {
  const int64_t n = logits.size(0), v = logits.size(1);
  int32_t* out = tokens.data_as<int32_t>();
  dispatch_float(logits.dtype(), [&]<typename T>(TypeTag<T>) {
    ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
      float* z = thread_scratch(v, 0);
      float* work = thread_scratch(v, 1);
      float* probs = thread_scratch(v, 2);
      for (int64_t r = begin; r < end; ++r) {
        const SamplingParams& sp = params_of(params, r);
        const T* raw = row_ptr<const T>(logits, r);
        if (sp.greedy()) {
          load_f32(raw, z, v);
          out[r] = static_cast<int32_t>(argmax_f32(z, v));
          continue;
        }
        process_row(raw, z, v, sp, probs, work);
        const size_t i = static_cast<size_t>(r);
        out[r] = draw_index(probs, v, philox_uniform(seeds[i], counters[i], kLaneSample));
      }
    });
  });
}

void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens) {
  const int64_t n = probs.size(0), v = probs.size(1);
  const float* u = uniforms.data_as<float>();
  int32_t* out = tokens.data_as<int32_t>();
  ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      out[r] = draw_index(row_ptr<const float>(probs, r), v, u[r]);
  });
}

}  // namespace dspark::cpu
