// DraftSource: the one seam every drafting method implements (prompt lookup, a draft model,
// DFlash/DSpark block drafters, MTP heads, EAGLE). The engine drives it per request row:
//
//   begin(row, prompt)            once, before the target's prefill
//   commit(rows, updates, taps)   after every target forward: the tokens the target processed and
//                                 kept (the prompt at prefill; [pending, accepted drafts] after a
//                                 verify), their hidden taps, and the new pending token
//   propose(rows, requests)       before every verify: up to max_tokens drafts per row, each
//                                 continuing after the row's pending token
//   release(row)                  when the request ends
//
// "Pending" is the last emitted token, which the target has not processed yet: it heads the next
// verify input [pending, draft_1 .. draft_k] and is the anchor of block drafters.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"
#include "dspark/ops/sampling.h"
#include "dspark/spec/draft_grammar.h"

namespace dspark {

using RowId = int32_t;

struct RowUpdate {
  RowId row = 0;
  // Tokens the target processed this step and kept, in sequence order; they occupy sequence
  // positions [first_position, first_position + kept_tokens.size()).
  std::span<const int32_t> kept_tokens;
  int32_t first_position = 0;
  // Index of kept_tokens[0] in the batch's tap tensors (rows of the target forward output).
  int32_t tap_offset = 0;
  // The new pending token (sequence position first_position + kept). -1 while a long prompt is
  // prefilled in chunks: more kept tokens follow before the first pending token.
  int32_t pending = -1;
  int32_t n_drafted = 0;   // this round's proposal length (0 at prefill)
  int32_t n_accepted = 0;  // drafts accepted this round
};

struct ProposeRequest {
  RowId row = 0;
  int max_tokens = 0;       // the source may propose fewer, including none
  SamplingParams sampling;  // the request's processing; greedy drafts give q = one-hot
  uint64_t seed = 0;
  // Structured output: the row's grammar at its emitted document (null: unconstrained). Sources
  // that choose drafts one position at a time mask each choice with it and move it over the
  // drafts (spec/draft_grammar.h); valid during this propose call only.
  DraftGrammar* grammar = nullptr;
};

struct Proposal {
  // Drafts of request i: tokens[indptr[i] .. indptr[i+1]) (host).
  std::vector<int32_t> indptr{0};
  std::vector<int32_t> tokens;
  // The processed draft distribution q of each drafted token, f32 [tokens.size(), vocab] on the
  // context's device; undefined when every draft is deterministic (q = one-hot of the token).
  Tensor q;
  // Per drafted token (parallel to tokens), or empty: the source's calibrated probability that the
  // draft is accepted when every draft before it in its row is (a DSpark drafter's confidence
  // through its acceptance curve). The adaptive draft policy cuts each row where the rest does not
  // pay for its verify rows.
  std::vector<float> acceptance;
  void clear() {
    indptr.assign(1, 0);
    tokens.clear();
    q = Tensor();
    acceptance.clear();
  }
  int count(size_t i) const { return indptr[i + 1] - indptr[i]; }
};

struct DraftStats {
  int64_t n_propose_calls = 0;
  int64_t n_drafted = 0;
  double propose_ms = 0;
  double commit_ms = 0;
  // Of propose_ms and commit_ms: deferred work done when a row drafts again (a DSpark drafter's
  // staged context), a one-off cost of resuming rather than one of each drafting round.
  double catch_up_ms = 0;
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::string name() const = 0;
  // Target layers whose outputs the source needs at commit (model/model.h tap convention).
  virtual std::vector<int> target_taps() const { return {}; }

  virtual void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) = 0;
  // taps: one tensor per target_taps() entry, [n_batch_tokens, hidden], rows addressed by
  // RowUpdate::tap_offset (empty when the source asks for no taps).
  virtual void commit(Context& ctx, std::span<const RowUpdate> updates,
                      std::span<const Tensor> taps) = 0;
  // Appends to `out` (cleared by the caller) one entry per request, in order.
  virtual void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) = 0;
  virtual void release(RowId row) = 0;
  virtual DraftStats stats() const { return {}; }
  // Whether commit() defers the work of rows that drafted nothing in their round (until they draft
  // again): the commit then costs in proportion to the drafting rows, and the adaptive draft
  // policy counts it with the draft step's cost.
  virtual bool defers_idle_commits() const { return false; }

  // Prefix reuse (SpecConfig::prefix_cache) for a source that keeps per-token state made from the
  // target's taps (which a reused prefix never produces): it publishes that state like the
  // target's KV pages and attaches it for a later row whose prompt starts with the same tokens.
  // Sources without such state (no taps) need none of this.
  virtual bool reuses_prefixes() const { return false; }
  // The granule of attach_prefix's lengths (the source's KV page).
  virtual int prefix_page() const { return 1; }
  // After begin(row): attaches the published state of prompt[0 .. n), n <= max_tokens a multiple
  // of prefix_page(), and returns n (0 when nothing matches).
  virtual int attach_prefix(RowId row, std::span<const int32_t> prompt, int max_tokens) {
    (void)row, (void)prompt, (void)max_tokens;
    return 0;
  }
  // Drops the attached state from position n on (n a multiple of prefix_page()).
  virtual void trim_prefix(RowId row, int n) { (void)row, (void)n; }
  // After the commit that completed the row's prompt: publishes the state of prompt[0 .. n).
  virtual void publish_prefix(RowId row, std::span<const int32_t> prompt, int n) {
    (void)row, (void)prompt, (void)n;
  }
};

// A source that passes every call to `inner` (which must outlive it): the base of decorators
// that watch or time one call, e.g. propose() (benchmarks, tests).
class ForwardingDraftSource : public DraftSource {
 public:
  explicit ForwardingDraftSource(DraftSource& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  std::vector<int> target_taps() const override { return inner_.target_taps(); }
  void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) override {
    inner_.begin(ctx, row, prompt);
  }
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override {
    inner_.commit(ctx, updates, taps);
  }
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    inner_.propose(ctx, requests, out);
  }
  void release(RowId row) override { inner_.release(row); }
  DraftStats stats() const override { return inner_.stats(); }
  bool defers_idle_commits() const override { return inner_.defers_idle_commits(); }
  bool reuses_prefixes() const override { return inner_.reuses_prefixes(); }
  int prefix_page() const override { return inner_.prefix_page(); }
  int attach_prefix(RowId row, std::span<const int32_t> prompt, int max_tokens) override {
    return inner_.attach_prefix(row, prompt, max_tokens);
  }
  void trim_prefix(RowId row, int n) override { inner_.trim_prefix(row, n); }
  void publish_prefix(RowId row, std::span<const int32_t> prompt, int n) override {
    inner_.publish_prefix(row, prompt, n);
  }

 protected:
  DraftSource& inner() const { return inner_; }

 private:
  DraftSource& inner_;
};

}  // namespace dspark
