#include "dspark/spec/ngram_source.h"

#include <algorithm>
#include <chrono>

#include "dspark/core/elapsed.h"

namespace dspark {

NgramSource::NgramSource(NgramConfig config) : config_(config) {
  DSPARK_CHECK_KIND(invalid_input, config.ngram_min >= 1 && config.ngram_max >= config.ngram_min,
                    "ngram sizes must satisfy 1 <= ngram-min <= ngram-max (got {} and {})",
                    config.ngram_min, config.ngram_max);
}

void NgramSource::begin(Context&, RowId row, std::span<const int32_t> prompt) {
  history_[row].assign(prompt.begin(), prompt.end());
}

void NgramSource::commit(Context&, std::span<const RowUpdate> updates, std::span<const Tensor>) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const RowUpdate& u : updates) {
    auto it = history_.find(u.row);
    DSPARK_CHECK(it != history_.end(), "ngram: commit for unknown row {}", u.row);
    std::vector<int32_t>& h = it->second;
    // history = processed tokens + pending; drop the old pending (it is kept_tokens[0] again,
    // or, at prefill, the prompt is re-sent as kept tokens).
    h.resize(static_cast<size_t>(u.first_position));
    h.insert(h.end(), u.kept_tokens.begin(), u.kept_tokens.end());
    if (u.pending >= 0) h.push_back(u.pending);
  }
  stats_.commit_ms += elapsed_ms(t0);
}

std::vector<int32_t> NgramSource::lookup(std::span<const int32_t> h, int max_tokens,
                                         const NgramConfig& config, const DraftGrammar* grammar) {
  const int64_t len = static_cast<int64_t>(h.size());
  if (max_tokens <= 0) return {};
  auto run = [&](int64_t at, int64_t n) {
    return std::vector<int32_t>(h.begin() + at, h.begin() + at + n);
  };
  int64_t best_at = 0, best_take = 0;  // under a grammar: the longest allowed start so far
  int looked = 0;
  for (int n = std::min<int64_t>(config.ngram_max, len - 1); n >= config.ngram_min; --n) {
    const auto suffix = h.subspan(static_cast<size_t>(len - n));
    // Most recent earlier occurrence: the match ends at `end` (exclusive) < len.
    for (int64_t end = len - 1; end >= n; --end) {
      if (!std::equal(suffix.begin(), suffix.end(), h.begin() + (end - n))) continue;
      const int64_t take = std::min<int64_t>(max_tokens, len - end);
      if (!grammar) return run(end, take);
      const int64_t allowed =
          grammar->allowed_prefix(h.subspan(static_cast<size_t>(end), static_cast<size_t>(take)));
      if (allowed == take) return run(end, take);
      if (allowed > best_take) best_at = end, best_take = allowed;
      if (++looked == kGrammarCandidates) return run(best_at, best_take);
    }
  }
  return run(best_at, best_take);
}

void NgramSource::propose(Context&, std::span<const ProposeRequest> requests, Proposal& out) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const ProposeRequest& r : requests) {
    auto it = history_.find(r.row);
    DSPARK_CHECK(it != history_.end(), "ngram: propose for unknown row {}", r.row);
    const std::vector<int32_t> d = lookup(it->second, r.max_tokens, config_, r.grammar);
    out.tokens.insert(out.tokens.end(), d.begin(), d.end());
    out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
    stats_.n_drafted += static_cast<int64_t>(d.size());
  }
  ++stats_.n_propose_calls;
  stats_.propose_ms += elapsed_ms(t0);
}

void NgramSource::release(RowId row) {
  history_.erase(row);
}

}  // namespace dspark
