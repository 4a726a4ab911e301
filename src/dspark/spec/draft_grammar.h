// A row's output grammar as a draft source sees it (structured output): the state of the document
// after the row's emitted tokens, which the source moves over the tokens it drafts so that each
// draft is chosen among the tokens the grammar allows at its position. A sampled draft is drawn
// from q masked the same way and renormalised, and that q is the one the source returns (the
// verifier needs the distribution the draft was actually drawn from).
//
// The engine implements it (engine/json_draft.h) and resets it to the emitted document before
// every propose. A source that ignores it stays correct: the engine still cuts a row's drafts at
// the first token the grammar forbids (SpeculativeEngine::constrain_drafts), but the rest of that
// row's block is lost.
#pragma once

#include <cstdint>
#include <span>

namespace dspark {

class DraftGrammar {
 public:
  virtual ~DraftGrammar() = default;
  // The tokens allowed next, as one ops/token_mask.h bit row for logits of `vocab` columns
  // (EOS only once the document is complete); valid until the next call.
  virtual std::span<const uint32_t> mask(int64_t vocab) = 0;
  // Moves past `token`; false (and no move) when the grammar forbids it here.
  virtual bool advance(int32_t token) = 0;
  // Whether the tokens moved past so far end with an EOS: a draft after it is never accepted.
  virtual bool ended() const = 0;
  // How many leading `tokens` the grammar allows in a row from the current state (an EOS ends the
  // run, itself included when the document is complete there), without moving.
  virtual int allowed_prefix(std::span<const int32_t> tokens) const = 0;
};

}  // namespace dspark
