#include "dspark/engine/penalties.h"

#include <algorithm>
#include <cmath>

#include "dspark/core/error.h"

namespace dspark {

void validate(const PenaltyParams& p) {
  DSPARK_CHECK_KIND(invalid_input, std::isfinite(p.repetition) && p.repetition > 0.0f,
                    "repetition_penalty must be a finite number > 0, got {}", p.repetition);
  DSPARK_CHECK_KIND(invalid_input, p.presence >= -2.0f && p.presence <= 2.0f,
                    "presence_penalty must be in [-2, 2], got {}", p.presence);
  DSPARK_CHECK_KIND(invalid_input, p.frequency >= -2.0f && p.frequency <= 2.0f,
                    "frequency_penalty must be in [-2, 2], got {}", p.frequency);
}

PenaltyHistory::PenaltyHistory(const PenaltyParams& params, std::span<const int32_t> prompt)
    : params_(params) {
  if (params.repetition == 1.0f) return;
  prompt_.assign(prompt.begin(), prompt.end());
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

void PenaltyHistory::append_entries(int32_t row, std::span<const int32_t> extra,
                                    std::vector<PenaltyEntry>& out) const {
  if (!params_.active()) return;
  // (token, generated count) of the generated tokens and the extra ones, merged by token.
  std::vector<std::pair<int32_t, int32_t>>& counts = scratch_;
  counts.assign(generated_.begin(), generated_.end());
  for (const int32_t t : extra) counts.emplace_back(t, 1);
  std::sort(counts.begin(), counts.end());
  size_t w = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (w > 0 && counts[w - 1].first == counts[i].first) {
      counts[w - 1].second += counts[i].second;
    } else {
      counts[w++] = counts[i];
    }
  }
  counts.resize(w);

  auto emit = [&](int32_t token, int32_t count) {
    PenaltyEntry e;
    e.row = row;
    e.token = token;
    e.repetition = params_.repetition;
    if (count > 0) e.subtract = params_.frequency * static_cast<float>(count) + params_.presence;
    if (e.repetition != 1.0f || e.subtract != 0.0f) out.push_back(e);
  };
  // Merge of the prompt's tokens (count 0 unless also generated) and the generated ones.
  size_t p = 0, g = 0;
  while (p < prompt_.size() || g < counts.size()) {
    if (g == counts.size() || (p < prompt_.size() && prompt_[p] < counts[g].first)) {
      emit(prompt_[p++], 0);
    } else {
      if (p < prompt_.size() && prompt_[p] == counts[g].first) ++p;
      emit(counts[g].first, counts[g].second);
      ++g;
    }
  }
}

}  // namespace dspark
