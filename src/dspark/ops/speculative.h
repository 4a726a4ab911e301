// The accept/resample step of speculative decoding (Leviathan et al. 2023; Chen et al. 2023), as
// one op with a CPU kernel and a CUDA kernel. The verifier (spec/verifier.h) composes it with
// process_logits; it is the only place that decides which drafted tokens survive.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/philox.h"
#include "dspark/core/tensor.h"

namespace dspark {

// Rows r = 0..n-1 (one per request). Row r drafted k_r = draft_indptr[r+1] - draft_indptr[r]
// tokens x_j = draft_tokens[draft_indptr[r] + j] and the target produced k_r + 1 processed
// distributions p_j = p[draft_indptr[r] + r + j] (p_0 scores x_0, ..., p_k is the bonus row).
// modes[r] (SpecSampling as i32) picks the rule of the row:
//
// coupled: t_j = the inverse-CDF draw from p_j with u = philox_uniform(seeds[r], positions[r] + j,
// kLaneSample), the same draw (same function, same uniform) as sample() at that position. For
// j = 0..k_r-1 in order, accept x_j iff x_j == t_j; at the first mismatch the next token is t_j;
// if all k_r are accepted it is t_{k_r} (the bonus). q is not read. Every emitted token is then
// the token plain sampling with the same seed emits at that position.
//
// rejection: for j = 0..k_r-1 in order: with u = philox_uniform(seeds[r], positions[r] + j,
// kLaneAccept), accept x_j iff u * q_j(x_j) < p_j(x_j)  (q_j = q[draft_indptr[r] + j], or
// one-hot(x_j) when q is undefined: accept iff u < p_j(x_j)); a token with p_j(x_j) = 0 is never
// accepted. At the first rejection draw the next token from norm(max(0, p_j - q_j)) (from p_j when
// that residual is all zero) with u' = philox_uniform(seeds[r], positions[r] + j, kLaneResample);
// if all k_r are accepted draw the bonus from p_k with u' at position positions[r] + k_r.
//
// Draws are inverse-CDF in index order with double accumulation (as sample_from_probs).
//   p: f32 [sum(k_r + 1), V]; q: f32 [sum(k_r), V] or undefined; draft_tokens: i32 [sum(k_r)];
//   draft_indptr: i32 [n + 1]; seeds: i64 [n] (bit pattern of the u64 seed); positions: i32 [n]
//   (sequence position of x_0, i.e. of the target's first new token); modes: i32 [n]; outputs
//   n_accepted: i32 [n], next_token: i32 [n]. All on the context's device.
void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& modes, const Tensor& n_accepted, const Tensor& next_token);

// The lane of the uniform a drafter draws its token with at a sequence position: a coupled row
// drafts with the target's own uniform (kLaneSample), so that a drafter whose q is close to p
// proposes the token the target will sample; a rejection row needs a uniform independent of the
// accept test (kLaneDraft).
inline int draft_lane(SpecSampling mode) {
  return mode == SpecSampling::coupled ? kLaneSample : kLaneDraft;
}

}  // namespace dspark
