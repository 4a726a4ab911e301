#include "dspark/engine/json_draft.h"

#include "dspark/core/error.h"
#include "dspark/ops/token_mask.h"

namespace dspark {

std::span<const uint32_t> JsonDraftGrammar::mask(int64_t vocab) {
  DSPARK_CHECK(state_.has_value(), "structured output: draft grammar used before reset");
  if (!ended_) return masks_.mask(c_, vocab, *state_);
  // After an EOS the output is over: only EOS again (the engine cuts such drafts anyway).
  eos_only_.assign(static_cast<size_t>(token_mask_words(vocab)), 0u);
  for (const int32_t id : c_.eos)
    if (id >= 0 && id < vocab) eos_only_[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  return eos_only_;
}

bool JsonDraftGrammar::advance(int32_t token) {
  DSPARK_CHECK(state_.has_value(), "structured output: draft grammar used before reset");
  if (c_.is_eos(token)) {
    if (!ended_ && !state_->complete()) return false;
    ended_ = true;
    return true;
  }
  if (ended_) return false;
  JsonMatcher next = *state_;
  if (!c_.vocab->advance(next, token)) return false;
  state_ = next;
  return true;
}

int JsonDraftGrammar::allowed_prefix(std::span<const int32_t> tokens) const {
  DSPARK_CHECK(state_.has_value(), "structured output: draft grammar used before reset");
  if (ended_) return 0;
  JsonMatcher m = *state_;
  const int n = static_cast<int>(tokens.size());
  for (int j = 0; j < n; ++j) {
    const int32_t t = tokens[static_cast<size_t>(j)];
    if (c_.is_eos(t)) return m.complete() ? j + 1 : j;
    if (!c_.vocab->advance(m, t)) return j;
  }
  return n;
}

}  // namespace dspark
