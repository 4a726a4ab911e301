// The CPU's inverse-CDF draw, shared by plain sampling (sample, sample_from_probs) and the coupled
// speculative verifier, so that both draw the same token from the same probabilities and uniform.
#pragma once

#include <cstdint>

namespace dspark::cpu {

// The first index whose cumulative (double) probability exceeds u * total, scanning 0..v-1;
// entries <= 0 or NaN count as 0; the last positive entry when rounding leaves none; 0 if none is
// positive.
inline int32_t draw_index(const float* probs, int64_t v, float u) {
  double total = 0.0;
  for (int64_t i = 0; i < v; ++i)
    if (probs[i] > 0.0f) total += probs[i];
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int64_t last = -1;
  for (int64_t i = 0; i < v; ++i) {
    if (!(probs[i] > 0.0f)) continue;
    cum += probs[i];
    last = i;
    if (cum > target) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last < 0 ? 0 : last);
}

}  // namespace dspark::cpu
