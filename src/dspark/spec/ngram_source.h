// Prompt lookup (n-gram) drafting: find the most recent earlier occurrence of the longest suffix
// n-gram (n from ngram_max down to ngram_min) of the row's tokens (prompt + generated, ending with
// the pending token) and propose the tokens that followed it. Deterministic: q = one-hot.
// Under a grammar (structured output) the occurrences are tried in the same order and the first
// whose continuation the grammar allows in full is proposed; when none is, the longest allowed
// start of one (kGrammarCandidates occurrences at most are looked at).
#pragma once

#include <unordered_map>
#include <vector>

#include "dspark/spec/draft_source.h"

namespace dspark {

struct NgramConfig {
  int ngram_min = 1;
  int ngram_max = 4;
};

class NgramSource final : public DraftSource {
 public:
  explicit NgramSource(NgramConfig config);
  std::string name() const override { return "ngram"; }
  void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) override;
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override;
  void release(RowId row) override;
  DraftStats stats() const override { return stats_; }

  // Occurrences looked at per row and round under a grammar.
  static constexpr int kGrammarCandidates = 32;

  // The lookup itself, exposed for tests: drafts for `history` (its last token is the pending
  // one), only tokens `grammar` allows when it is given.
  static std::vector<int32_t> lookup(std::span<const int32_t> history, int max_tokens,
                                     const NgramConfig& config,
                                     const DraftGrammar* grammar = nullptr);

 private:
  NgramConfig config_;
  std::unordered_map<RowId, std::vector<int32_t>> history_;
  DraftStats stats_;
};

}  // namespace dspark
