// Adaptive draft length: each round, every row's draft length (0 .. its cap) is chosen to maximise
// the round's expected tokens per second,
//
//   sum_i E[accepted_i + 1] / (verify(batch tokens) + draft(drafting rows, drafts) + fixed)
//
// from a cost model of the round on this model and device (the verify forward profiled by batch
// tokens, engine/verify_cost.h, scaled by how long the rounds' verifies really take; the draft and
// fixed costs measured as rounds run) and a per-row acceptance estimate (the EWMA of the row's past
// rounds, per draft position, starting from the engine's pooled estimate). A row drafting 0 tokens
// is plain decoding for that round; its draft source still gets every kept token, so it can
// resume (a DSpark drafter defers their projection until then) when a probe (DraftProbe) or a
// cheaper round says drafting pays again. The choice depends only on past rounds, never on the
// target's output at the positions being drafted, so verification (and sampling) stays exact.
#pragma once

#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark {

enum class DraftPolicy {
  fixed,     // every row drafts min(gamma, tokens left - 1) each round
  adaptive,  // per row and round, the length that maximises expected tokens per second
};
std::string_view draft_policy_name(DraftPolicy policy);
// "adaptive" or "fixed"; invalid_input otherwise.
DraftPolicy parse_draft_policy(std::string_view name);

// The time of one decode round (milliseconds).
struct RoundCostModel {
  // Verify forward time by the batch's token count: (tokens, ms) points with ascending tokens;
  // linear between points, the last segment's slope past the end, the first point below it.
  std::vector<std::pair<int, double>> verify;
  // Measured verify time / the profile's, over recent rounds (the rows' contexts, the device's
  // load).
  double verify_scale = 1;
  // DraftSource::propose: per row that drafts, and per draft asked for.
  double draft_ms_per_row = 0, draft_ms_per_token = 0;
  double fixed_ms = 0;  // the rest of a round (commit, rollback, emission)
  double verify_ms(int tokens) const;
  double round_ms(int tokens, int drafting_rows, int drafts) const;
};

// The draft cost of recent rounds, fitted as ms = per_row * rows + per_token * drafts
// (non-negative least squares over exponentially weighted rounds).
class DraftCostFit {
 public:
  static constexpr double kDecay = 0.9;  // weight of the older rounds per new round
  void observe(int rows, int drafts, double ms);
  void apply(RoundCostModel& cost) const;

 private:
  double rr_ = 0, rd_ = 0, dd_ = 0, ry_ = 0, dy_ = 0;
};

// One row's acceptance estimate: for each draft position j (1-based), the probability that draft j
// is accepted given drafts 1 .. j-1 were; the EWMA over the rounds that reached j. It changes only
// with evidence (rounds that drafted, rated drafts): a row that stops drafting keeps it, and
// DraftProbe decides when it tries again.
class AcceptanceEstimate {
 public:
  static constexpr float kPrior = 0.7f;  // a new row's estimate at every position
  // EWMA weight of a new observation. Acceptance comes in bursts: at 0.25 three rejections in a row
  // took a row's estimate below the point where drafting pays, and it stopped drafting for long
  // stretches of text it would have drafted well.
  static constexpr float kRate = 0.1f;
  AcceptanceEstimate() = default;
  explicit AcceptanceEstimate(int positions) : p_(static_cast<size_t>(positions), kPrior) {}
  // A new row's estimate: a copy of `pooled` (the engine's estimate over all rows).
  void start_from(const AcceptanceEstimate& pooled) { p_ = pooled.p_; }
  // Every position back to the prior (a probe was accepted: DraftProbe).
  void reset();
  // A round that proposed `drafted` tokens of which the first `accepted` were accepted.
  void observe(int drafted, int accepted);
  // Drafts first .. first + expected.size() - 1 (0-based positions) that were reached but not
  // verified: each position's estimate moves toward the given probability of acceptance, as if
  // observed.
  void expect(int first, std::span<const float> expected);
  std::span<const float> conditional() const { return p_; }

 private:
  std::vector<float> p_;
};

// When a row whose estimate stopped its drafts tries one again, with backoff. A row the policy
// gives no draft waits backoff() rounds; then, for one round, the policy is offered a probe: one
// draft rated at the prior (AcceptanceEstimate::kPrior). The policy takes it only where one draft
// at that rate would pay for this batch, i.e. where the row's acceptance, not the batch's cost,
// stopped it. An accepted probe starts the row's estimate over from the prior; a rejected or
// declined one doubles the wait (kMinBackoff .. kMaxBackoff); a round the policy drafts on its own
// sets it back to kMinBackoff. A drafter whose drafts are never accepted then costs one probe
// draft per kMaxBackoff rounds and row; a row that drafted until a burst of rejections stopped it
// is offered its first probe kMinBackoff rounds later.
class DraftProbe {
 public:
  static constexpr int kMinBackoff = 4;
  static constexpr int kMaxBackoff = 256;
  explicit DraftProbe(int backoff = kMinBackoff);
  // A probe's rating for the chooser: its one draft at the prior.
  static std::span<const float> rating() { return kRating; }
  int backoff() const { return backoff_; }
  // Whether this round offers the policy a probe (the row was given no draft for backoff() rounds).
  bool due() const { return waited_ >= backoff_; }
  // The round's outcome for the row: the policy drafted on its own; gave no draft (no probe
  // offered); or a probe was offered and declined, or taken and rejected or accepted. Returns
  // true when the row's estimate should start over (AcceptanceEstimate::reset).
  void drafted();
  void waited();
  bool probed(bool taken, bool accepted);

 private:
  static constexpr float kRating[1] = {AcceptanceEstimate::kPrior};
  int backoff_;
  int waited_ = 0;
};

struct DraftLengthRow {
  std::span<const float> accept;  // AcceptanceEstimate::conditional()
  int cap = 0;                    // the most drafts allowed (gamma, tokens left)
};

// Each row's draft length in [0, cap] (`lengths`, resized to rows.size()). Drafts are taken in
// order of their expected gain (draft j of a row gains prod_{l <= j} accept[l]); the chosen count
// is the prefix of that order with the highest expected tokens per millisecond (ties: fewer
// drafts). Exact when the cost depends on the batch and draft tokens only (draft_ms_per_row = 0);
// a close choice otherwise.
void choose_draft_lengths(std::span<const DraftLengthRow> rows, const RoundCostModel& cost,
                          std::vector<int>& lengths);

}  // namespace dspark
