// Structured output's grammar as draft sources see it (spec/draft_grammar.h): a row's JSON
// matcher state, moved over the drafts of one proposal, with the row's token mask cache.
#pragma once

#include <optional>
#include <vector>

#include "dspark/engine/json_mask.h"
#include "dspark/engine/json_matcher.h"
#include "dspark/spec/draft_grammar.h"

namespace dspark {

class JsonDraftGrammar final : public DraftGrammar {
 public:
  // `constraint` and `masks` must outlive it.
  JsonDraftGrammar(const JsonConstraint& constraint, JsonMaskCache& masks)
      : c_(constraint), masks_(masks) {}
  // Starts over at `document` (the row's emitted text).
  void reset(const JsonMatcher& document) {
    state_ = document;
    ended_ = false;
  }

  std::span<const uint32_t> mask(int64_t vocab) override;
  bool advance(int32_t token) override;
  bool ended() const override { return ended_; }
  int allowed_prefix(std::span<const int32_t> tokens) const override;

 private:
  const JsonConstraint& c_;
  JsonMaskCache& masks_;
  std::optional<JsonMatcher> state_;
  bool ended_ = false;
  std::vector<uint32_t> eos_only_;  // the mask after an EOS
};

}  // namespace dspark
