// The verify forward's cost on this model and device, measured once when an engine with the
// adaptive draft policy starts (spec/draft_length.h's RoundCostModel::verify).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"

namespace dspark {

struct VerifyCostProfile {
  std::vector<std::pair<int, double>> points;  // (batch tokens, ms), ascending tokens
  int forwards = 0;                            // forwards run, warm-ups included
  double seconds = 0;                          // wall time of the profile
  // The cache file it was read from (engine/verify_cost_cache.h); empty when measured here.
  std::string loaded_from;
};

// Times target forwards shaped like verify batches (rows of up to `max_rows`, `width` tokens each,
// logits for every token, the draft source's `taps`) at batch token counts 1, 2, 4, ... and
// max_rows * width, in that order, while their predicted time fits in `budget_s` seconds (1 and 2
// always): the small batches, where the cost per token changes most, come first; RoundCostModel
// extrapolates past the last point. Each point is the best of three runs after a warm-up forward
// of its shape, and no point is above a later one (a disturbed run). The rows are
// fresh sequences of `kv` (released afterwards), so attention sees only the batch itself: the
// profile is the cost of the batch's tokens, not of the rows' contexts. Stops early (with the
// points so far) when the cache cannot hold a batch.
VerifyCostProfile profile_verify_cost(Model& target, Context& ctx, PagedKvCache& kv,
                                      std::span<const int> taps, int max_rows, int width,
                                      double budget_s);
// One line: "verify cost profiled in 0.41 s (21 forwards): 1 tokens 9.8 ms, 2 tokens ...", or
// "verify cost loaded from FILE: 1 tokens 9.8 ms, ..." for a cached profile.
std::string describe(const VerifyCostProfile& profile);

}  // namespace dspark
