#include "dspark/engine/token_logprobs.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace dspark {

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, float temperature, int32_t chosen,
                             int top_n) {
  const float t = temperature > 0.0f ? temperature : 1.0f;
  // z as ops/sampling.h scales it: NaN -> -inf, +inf or overflow -> FLT_MAX.
  auto z = [&](int64_t i) {
    float v = logits[i] / t;
    if (std::isnan(v)) return -INFINITY;
    return std::min(v, FLT_MAX);
  };
  float m = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) m = std::max(m, z(i));
  double sum = 0.0;
  if (m > -INFINITY)
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(z(i)) - m);
  const double lse = m > -INFINITY ? m + std::log(sum) : 0.0;
  auto lp = [&](int64_t i) { return static_cast<float>(static_cast<double>(z(i)) - lse); };

  TokenLogprobs out;
  out.token = chosen;
  out.logprob = lp(chosen);
  const auto n = static_cast<int64_t>(std::clamp<int64_t>(top_n, 0, vocab));
  if (n == 0) return out;
  // The n largest z (ties: lower id first) by a bounded min-heap.
  std::vector<std::pair<float, int32_t>> heap;  // (z, id), the worst at the front
  heap.reserve(static_cast<size_t>(n) + 1);
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  for (int64_t i = 0; i < vocab; ++i) {
    const std::pair<float, int32_t> c{z(i), static_cast<int32_t>(i)};
    if (static_cast<int64_t>(heap.size()) < n) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  for (const auto& [v, id] : heap) out.top.push_back({id, lp(id)});
  return out;
}

}  // namespace dspark
