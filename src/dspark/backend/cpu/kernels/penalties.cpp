// CPU kernel of apply_penalties (contract: ops/penalties.h): the entries in order, one f32
// operation per statement (the CUDA kernel uses the same rounded operations).
#include <unordered_set>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/error.h"

namespace dspark::cpu {

void apply_penalties(Context&, const Tensor& logits, std::span<const PenaltyEntry> entries) {
  std::unordered_set<int64_t> seen;
  seen.reserve(entries.size());
  const int64_t v = logits.size(1);
  for (const PenaltyEntry& e : entries) {
    DSPARK_CHECK(seen.insert(int64_t{e.row} * v + e.token).second,
                 "apply_penalties: entry ({}, {}) is listed twice", e.row, e.token);
    float* x = logits.data_as<float>() + e.row * logits.stride(0) + e.token;
    volatile float y = *x;  // volatile: no contraction of the two steps into one fma
    if (e.repetition != 1.0f) y = y > 0.0f ? y / e.repetition : y * e.repetition;
    *x = y - e.subtract;
  }
}

}  // namespace dspark::cpu
