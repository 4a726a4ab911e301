#include "dspark/spec/draft_length.h"

#include <algorithm>

#include "dspark/core/error.h"

namespace dspark {

std::string_view draft_policy_name(DraftPolicy policy) {
  return policy == DraftPolicy::adaptive ? "adaptive" : "fixed";
}

DraftPolicy parse_draft_policy(std::string_view name) {
  if (name == "adaptive") return DraftPolicy::adaptive;
  if (name == "fixed") return DraftPolicy::fixed;
  DSPARK_FAIL(invalid_input, "unknown draft policy '{}' (adaptive or fixed)", name);
}

double RoundCostModel::verify_ms(int tokens) const {
  if (verify.empty()) return 0;
  if (verify.size() == 1 || tokens <= verify.front().first)
    return verify_scale * verify.front().second;
  size_t i = 1;
  while (i + 1 < verify.size() && verify[i].first < tokens) ++i;
  const auto [t0, ms0] = verify[i - 1];
  const auto [t1, ms1] = verify[i];
  const double slope = t1 > t0 ? (ms1 - ms0) / (t1 - t0) : 0;
  return verify_scale * std::max(0.0, ms0 + slope * (tokens - t0));
}

double RoundCostModel::round_ms(int tokens, int drafting_rows, int drafts) const {
  return verify_ms(tokens) + draft_ms_per_row * drafting_rows + draft_ms_per_token * drafts +
         fixed_ms;
}

void DraftCostFit::observe(int rows, int drafts, double ms) {
  const double r = rows, d = drafts;
  rr_ = kDecay * rr_ + r * r;
  rd_ = kDecay * rd_ + r * d;
  dd_ = kDecay * dd_ + d * d;
  ry_ = kDecay * ry_ + r * ms;
  dy_ = kDecay * dy_ + d * ms;
}

void DraftCostFit::apply(RoundCostModel& cost) const {
  if (rr_ <= 0 || dd_ <= 0) return;
  // The 2 x 2 normal equations, with a little ridge for rounds that all had the same shape.
  const double ridge = 1e-6 * (rr_ + dd_);
  const double a = rr_ + ridge, b = rd_, c = dd_ + ridge;
  const double det = a * c - b * b;
  double per_row = det > 0 ? (c * ry_ - b * dy_) / det : -1;
  double per_token = det > 0 ? (a * dy_ - b * ry_) / det : -1;
  if (per_row < 0 || per_token < 0) {  // one term alone: the one that fits better
    const double row_only = ry_ / rr_, token_only = dy_ / dd_;
    const double row_err = -row_only * ry_, token_err = -token_only * dy_;  // SSE minus sum y^2
    per_row = row_err <= token_err ? row_only : 0;
    per_token = row_err <= token_err ? 0 : token_only;
  }
  cost.draft_ms_per_row = std::max(0.0, per_row);
  cost.draft_ms_per_token = std::max(0.0, per_token);
}

void AcceptanceEstimate::observe(int drafted, int accepted) {
  // Draft j (0-based) was reached when every draft before it was accepted.
  const int reached = std::min({drafted, accepted + 1, static_cast<int>(p_.size())});
  for (int j = 0; j < reached; ++j) {
    float& p = p_[static_cast<size_t>(j)];
    p += kRate * ((j < accepted ? 1.0f : 0.0f) - p);
  }
}

void AcceptanceEstimate::expect(int first, std::span<const float> expected) {
  for (size_t k = 0; k < expected.size(); ++k) {
    const size_t j = static_cast<size_t>(first) + k;
    if (j >= p_.size()) break;
    p_[j] += kRate * (std::clamp(expected[k], 0.0f, 1.0f) - p_[j]);
  }
}

void AcceptanceEstimate::reset() {
  std::fill(p_.begin(), p_.end(), kPrior);
}

DraftProbe::DraftProbe(int backoff) : backoff_(std::clamp(backoff, kMinBackoff, kMaxBackoff)) {}

void DraftProbe::drafted() {
  backoff_ = kMinBackoff;
  waited_ = 0;
}

void DraftProbe::waited() {
  ++waited_;
}

bool DraftProbe::probed(bool taken, bool accepted) {
  waited_ = 0;
  if (taken && accepted) return true;  // the next round's choice says whether it drafts again
  backoff_ = std::min(2 * backoff_, kMaxBackoff);
  return false;
}

void choose_draft_lengths(std::span<const DraftLengthRow> rows, const RoundCostModel& cost,
                          std::vector<int>& lengths) {
  lengths.assign(rows.size(), 0);
  // Every draft a row may make, with its expected gain (the probability that it and all before it
  // are accepted): non-increasing along a row, so the order by gain keeps each row's drafts in
  // sequence (ties by position).
  struct Gain {
    float gain;
    int position;
    int row;
  };
  std::vector<Gain> gains;
  for (size_t i = 0; i < rows.size(); ++i) {
    float reach = 1.0f;
    const int n = std::min(rows[i].cap, static_cast<int>(rows[i].accept.size()));
    for (int j = 0; j < n; ++j) {
      reach *= std::clamp(rows[i].accept[static_cast<size_t>(j)], 0.0f, 1.0f);
      gains.push_back({reach, j, static_cast<int>(i)});
    }
  }
  std::stable_sort(gains.begin(), gains.end(), [](const Gain& a, const Gain& b) {
    return a.gain > b.gain || (a.gain == b.gain && a.position < b.position);
  });
  const int b = static_cast<int>(rows.size());
  double tokens = b;  // every row emits the target's own token
  int drafting = 0;
  double best_rate = tokens / std::max(cost.round_ms(b, 0, 0), 1e-9);
  size_t best_n = 0;
  for (size_t n = 0; n < gains.size(); ++n) {
    tokens += gains[n].gain;
    if (gains[n].position == 0) ++drafting;
    const double rate = tokens / std::max(cost.round_ms(b + static_cast<int>(n) + 1, drafting,
                                                        static_cast<int>(n) + 1),
                                          1e-9);
    if (rate > best_rate) {
      best_rate = rate;
      best_n = n + 1;
    }
  }
  for (size_t n = 0; n < best_n; ++n) ++lengths[static_cast<size_t>(gains[n].row)];
}

}  // namespace dspark
