// CPU kernels of moe_route and moe_combine (contract: ops/moe.h): one row per task, f32 math.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

// `a` ranks before `b` (a larger probability; NaN last).
bool ranks_before(float a, float b) {
  if (std::isnan(b)) return !std::isnan(a);
  return a > b;
}

}  // namespace

void moe_route(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
               const Tensor& weights) {
  const int64_t n = logits.size(0), experts = logits.size(1), k = ids.size(1);
  int32_t* out_ids = ids.data_as<int32_t>();
  float* out_w = weights.data_as<float>();
  dispatch_float(logits.dtype(), [&]<typename T>(TypeTag<T>) {
    ctx.pool().parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      float* p = thread_scratch(experts, 0);
      for (int64_t r = begin; r < end; ++r) {
        load_f32(row_ptr<const T>(logits, r), p, experts);
        float m = -INFINITY;
        for (int64_t e = 0; e < experts; ++e) m = std::max(m, p[e]);
        float sum = 0.0f;
        for (int64_t e = 0; e < experts; ++e) {
          p[e] = std::exp(p[e] - m);
          sum += p[e];
        }
        for (int64_t e = 0; e < experts; ++e) p[e] /= sum;
        // Selection by repeated scans: the first best index wins (ties -> the lower index).
        int32_t* row_ids = out_ids + r * k;
        float* row_w = out_w + r * k;
        float chosen_sum = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
          int64_t best = -1;
          for (int64_t e = 0; e < experts; ++e) {
            bool taken = false;
            for (int64_t i = 0; i < j; ++i) taken = taken || row_ids[i] == e;
            if (!taken && (best < 0 || ranks_before(p[e], p[best]))) best = e;
          }
          row_ids[j] = static_cast<int32_t>(best);
          row_w[j] = p[best];
          chosen_sum += p[best];
        }
        if (normalize) {
          for (int64_t j = 0; j < k; ++j) row_w[j] /= chosen_sum;
        }
      }
    });
  });
}

void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& slots, const Tensor& weights,
                 const Tensor& out) {
  const int64_t n = out.size(0), h = out.size(1), k = slots.size(1);
  const int32_t* slot = slots.data_as<int32_t>();
  const float* w = weights.data_as<float>();
  dispatch_float(expert_out.dtype(), [&]<typename TE>(TypeTag<TE>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, h * k));
      ctx.pool().parallel_for(n, grain, [&](int64_t begin, int64_t end) {
        float* acc = thread_scratch(h, 0);
        float* row = thread_scratch(h, 1);
        for (int64_t r = begin; r < end; ++r) {
          for (int64_t c = 0; c < h; ++c) acc[c] = 0.0f;
          for (int64_t j = 0; j < k; ++j) {
            load_f32(row_ptr<const TE>(expert_out, slot[r * k + j]), row, h);
            const float wj = w[r * k + j];
            for (int64_t c = 0; c < h; ++c) acc[c] += wj * row[c];
          }
          store_f32(acc, row_ptr<TO>(out, r), h);
        }
      });
    });
  });
}

}  // namespace dspark::cpu
