// CPU kernels of moe_route, moe_combine (one row per task, f32 math) and moe_group (contract:
// ops/moe.h).
#include <algorithm>
#include <cmath>
#include <vector>

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

// Writes the k entries of `score` that rank first (ties: the lower index) to ids, largest first,
// by repeated scans.
void choose_top_k(const float* score, int64_t n, int64_t k, int32_t* ids) {
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || ranks_before(score[e], score[best]))) best = e;
    }
    ids[j] = static_cast<int32_t>(best);
  }
}

// ids = the top k of score (choose_top_k); w[j] = score[ids[j]]. Returns the sum of the w.
float choose_and_weigh(const float* score, int64_t n, int64_t k, int32_t* ids, float* w) {
  choose_top_k(score, n, k, ids);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    w[j] = score[ids[j]];
    sum += w[j];
  }
  return sum;
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
        int32_t* row_ids = out_ids + r * k;
        float* row_w = out_w + r * k;
        const float chosen_sum = choose_and_weigh(p, experts, k, row_ids, row_w);
        if (normalize) {
          for (int64_t j = 0; j < k; ++j) row_w[j] /= chosen_sum;
        }
      }
    });
  });
}

void moe_route_grouped(Context& ctx, const Tensor& logits, const Tensor& bias,
                       const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights) {
  const int64_t n = logits.size(0), experts = logits.size(1), k = ids.size(1);
  const int64_t groups = p.n_group, group_size = experts / groups;
  const float* b = bias.data_as<float>();
  int32_t* out_ids = ids.data_as<int32_t>();
  float* out_w = weights.data_as<float>();
  dispatch_float(logits.dtype(), [&]<typename T>(TypeTag<T>) {
    ctx.pool().parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      float* s = thread_scratch(2 * experts + groups, 0);
      float* c = s + experts;
      float* group_score = c + experts;
      auto* kept = reinterpret_cast<int32_t*>(thread_scratch(groups + 2, 1));
      for (int64_t r = begin; r < end; ++r) {
        load_f32(row_ptr<const T>(logits, r), s, experts);
        for (int64_t e = 0; e < experts; ++e) {
          s[e] = 1.0f / (1.0f + std::exp(-s[e]));
          c[e] = s[e] + b[e];
        }
        for (int64_t g = 0; g < groups; ++g) {
          int32_t top2[2];
          choose_top_k(c + g * group_size, group_size, 2, top2);
          group_score[g] = c[g * group_size + top2[0]] + c[g * group_size + top2[1]];
        }
        choose_top_k(group_score, groups, p.topk_group, kept);
        for (int64_t g = 0; g < groups; ++g) {
          bool keep = false;
          for (int64_t i = 0; i < p.topk_group; ++i) keep = keep || kept[i] == g;
          if (!keep) std::fill(c + g * group_size, c + (g + 1) * group_size, -INFINITY);
        }
        int32_t* row_ids = out_ids + r * k;
        float* row_w = out_w + r * k;
        choose_top_k(c, experts, k, row_ids);
        float chosen_sum = 0.0f;  // the weights are the raw scores of the chosen experts
        for (int64_t j = 0; j < k; ++j) chosen_sum += row_w[j] = s[row_ids[j]];
        const float div = p.normalize ? chosen_sum + 1e-20f : 1.0f;
        for (int64_t j = 0; j < k; ++j) row_w[j] = row_w[j] / div * p.scale;
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

void moe_group(Context&, const Tensor& ids, const MoeGroups& g) {
  const int64_t m = ids.numel(), experts = g.offsets.size(0) - 1, k = ids.size(1);
  const int32_t* id = ids.data_as<int32_t>();
  auto* offsets = g.offsets.data_as<int32_t>();
  auto* active = g.active.data_as<int32_t>();
  auto* order = g.order.data_as<int32_t>();
  auto* slots = g.slots.data_as<int32_t>();
  std::fill(offsets, offsets + experts + 1, 0);
  for (int64_t i = 0; i < m; ++i) ++offsets[id[i] + 1];
  int32_t used = 0;
  for (int64_t e = 0; e < experts; ++e) {
    if (offsets[e + 1] > 0) active[1 + used++] = static_cast<int32_t>(e);
    offsets[e + 1] += offsets[e];
  }
  active[0] = used;
  // Stable: pairs in index order, so the tokens of an expert ascend.
  std::vector<int32_t> next(offsets, offsets + experts);
  for (int64_t i = 0; i < m; ++i) {
    const int32_t at = next[static_cast<size_t>(id[i])]++;
    order[at] = static_cast<int32_t>(i / k);
    slots[i] = at;
  }
}

}  // namespace dspark::cpu
