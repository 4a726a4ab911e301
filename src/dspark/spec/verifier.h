// The lossless verifier: one pure function of (target logits, drafts, draft distributions,
// sampling parameters, seeds, positions) -> (accepted count, next token) per request, on the CPU
// or CUDA. Greedy requests accept the longest prefix of drafts equal to the target's argmax and
// then emit the target's own argmax; sampled requests use speculative sampling
// (ops/speculative.h), so emitted tokens are distributed exactly as the target's.
// The Verifier object only caches device workspace between calls.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/spec/draft_source.h"

namespace dspark {

struct VerifyResult {
  std::vector<int32_t> n_accepted;  // per request
  std::vector<int32_t> next_token;  // per request: the target's token after the accepted prefix
};

class Verifier {
 public:
  // target_logits: f32 [sum over requests of (k_i + 1), vocab] on ctx's device, request i's rows
  //   in order ([pending, d_1..d_k] -> k_i + 1 rows);
  // proposal: the drafts (k_i = proposal.count(i)) and optional q;
  // params / seeds: per request; positions: per request, the sequence position of draft 1 (the
  //   position right after the pending token).
  VerifyResult verify(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                      std::span<const SamplingParams> params, std::span<const uint64_t> seeds,
                      std::span<const int32_t> positions);

 private:
  VerifyResult verify_greedy(Context& ctx, const Tensor& target_logits, const Proposal& proposal);

  OwnedTensor probs_;   // f32 [rows, vocab]
  OwnedTensor packed_;  // i32 staging for the index inputs and outputs
  OwnedTensor seeds_;   // i64 [n]
};

}  // namespace dspark
