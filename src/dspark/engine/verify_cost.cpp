#include "dspark/engine/verify_cost.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace dspark {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

VerifyCostProfile profile_verify_cost(Model& target, Context& ctx, PagedKvCache& kv,
                                      std::span<const int> taps, int max_rows, int width,
                                      double budget_s) {
  VerifyCostProfile profile;
  const auto t0 = Clock::now();
  max_rows = std::max(1, max_rows);
  width = std::max(1, width);
  const int max_tokens = max_rows * width;
  std::vector<int> counts;
  for (int n = 1; n < max_tokens; n *= 2) counts.push_back(n);
  counts.push_back(max_tokens);

  // One forward of `n` tokens over min(n, max_rows) rows; its wall ms, or < 0 when it cannot run.
  auto run = [&](int n) -> double {
    const int rows = std::min(n, max_rows);
    ForwardBatch batch;
    batch.row_indptr.push_back(0);
    batch.tap_layers.assign(taps.begin(), taps.end());
    batch.want_argmax = true;
    std::vector<SeqId> seqs;
    bool fits = true;
    for (int r = 0; r < rows; ++r) {
      const int w = n / rows + (r < n % rows ? 1 : 0);
      const SeqId seq = kv.create_sequence();
      seqs.push_back(seq);
      fits = fits && kv.reserve(seq, w);
      batch.tokens.insert(batch.tokens.end(), static_cast<size_t>(w), 0);
      batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
      batch.seqs.push_back(seq);
    }
    double ms = -1;
    if (fits) {
      batch.logit_indices.resize(batch.tokens.size());
      for (size_t t = 0; t < batch.tokens.size(); ++t)
        batch.logit_indices[t] = static_cast<int32_t>(t);
      const auto start = Clock::now();
      (void)target.forward(ctx, kv, batch);
      ctx.synchronize();
      ms = seconds_since(start) * 1e3;
      ++profile.forwards;
    }
    for (const SeqId s : seqs) kv.release(s);
    return ms;
  };

  // Timed runs per point: interference only adds time, so the best of a few is the cost.
  constexpr int kRuns = 3;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int n = counts[i];
    // The first two are always measured (the model needs a slope); a later one only when its
    // runs, predicted from the last point's time per token, fit in what is left of the budget.
    if (i >= 2) {
      const auto [n_last, ms_last] = profile.points.back();
      const double predicted_s = (kRuns + 1) * ms_last * n / n_last * 1e-3;
      if (seconds_since(t0) + predicted_s > budget_s) break;
    }
    if (run(n) < 0) break;  // warm-up (a CUDA graph capture, first-touch of buffers)
    double ms = run(n);
    for (int r = 1; r < kRuns; ++r) ms = std::min(ms, run(n));
    profile.points.emplace_back(n, ms);
  }
  // A larger batch never costs less than a smaller one: a point above a later one was disturbed.
  for (size_t i = profile.points.size(); i-- > 1;)
    profile.points[i - 1].second = std::min(profile.points[i - 1].second, profile.points[i].second);
  profile.seconds = seconds_since(t0);
  return profile;
}

std::string describe(const VerifyCostProfile& profile) {
  std::string out =
      profile.loaded_from.empty()
          ? fmt::format("verify cost profiled in {:.2f} s ({} forwards):", profile.seconds,
                        profile.forwards)
          : fmt::format("verify cost loaded from {}:", profile.loaded_from);
  for (size_t i = 0; i < profile.points.size(); ++i)
    out += fmt::format("{} {} tokens {:.2f} ms", i == 0 ? "" : ",", profile.points[i].first,
                       profile.points[i].second);
  return out;
}

}  // namespace dspark
