// The token choice of drafters that propose autoregressively, one batched forward per draft
// position (a draft model, an MTP layer): each step's tokens from its logits (argmax on greedy
// proposals; otherwise the request's processed distribution q sampled with its Philox uniform of
// the drafted position), and the proposal's q rows in proposal order. A request with a grammar
// (ProposeRequest::grammar, structured output) has its logits masked by the grammar's state after
// its earlier drafts before the choice, so q is the masked, renormalised distribution; its drafts
// end after an EOS.
//
//   DraftSteps steps;
//   steps.begin(ctx, requests, vocab);
//   for each step s: the requests i with steps.drafts(i) > s,
//     tokens = steps.choose(ctx, logits, active, positions, s);
//   steps.finish(drafts, out);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dspark/core/buffer.h"
#include "dspark/spec/draft_source.h"

namespace dspark {

// The first `rows` rows of `t`, reallocated (never shrinking below 8 rows) when it has fewer
// rows, other columns or another device.
Tensor ensure_rows(OwnedTensor& t, DType dtype, int64_t rows, int64_t cols, Device device);

class DraftSteps {
 public:
  void begin(Context& ctx, std::span<const ProposeRequest> requests, int64_t vocab);
  int max_steps() const { return max_k_; }
  // Drafts request i may still get: its max_tokens, fewer once its grammar ended the output.
  int drafts(size_t i) const { return limit_[i]; }
  // logits [m, V]: row a drafts for requests[active[a]] the token at sequence position
  // positions[a]; returns the m tokens (host). Rows of requests with a grammar are masked in
  // place, and the grammar moves past the chosen token.
  std::vector<int32_t> choose(Context& ctx, const Tensor& logits, std::span<const size_t> active,
                              std::span<const uint64_t> positions, int step);
  // Appends drafts[i] (request i's tokens, in order; the first drafts(i) of them) to `out`, with
  // their q when sampled.
  void finish(const std::vector<std::vector<int32_t>>& drafts, Proposal& out);
  int64_t n_drafted() const { return n_drafted_; }

 private:
  std::vector<int32_t> choose_tokens(Context& ctx, const Tensor& logits,
                                     std::span<const size_t> active,
                                     std::span<const uint64_t> positions, int step);

  std::span<const ProposeRequest> requests_;
  int max_k_ = 0;
  bool any_sampled_ = false;
  int64_t n_drafted_ = 0;
  std::vector<int> limit_;            // drafts(i)
  std::vector<int32_t> mask_rows_;    // choose: logits rows with a grammar mask
  std::vector<uint32_t> mask_words_;  // and their masks
  Tensor q_all_;                      // f32 [n * max_k, V]: request i, step j at row i * max_k + j
  OwnedTensor q_, step_probs_, uniforms_, step_tokens_;
};

}  // namespace dspark
