// Logit processing (temperature, top-k, top-p, min-p) and seeded sampling. The processed
// distribution is the one the speculative verifier compares (p for the target, q for a drafter),
// so the same function serves plain sampling and verification.
#pragma once

#include <cstdint>
#include <span>

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax); must be >= 0
  int top_k = 0;             // 0 = off; keep the k most probable tokens
  float top_p = 1.0f;        // 1 = off; keep the smallest set whose mass reaches top_p
  float min_p = 0.0f;        // 0 = off; keep tokens with p >= min_p * p_max
  bool greedy() const { return temperature <= 0.0f; }
};
// Throws invalid_input naming the field when a value is out of range.
void validate(const SamplingParams& params, int64_t vocab_size);

// The processing, in this order (HF's order for top-k / top-p / min-p): z = logits / T;
// keep the top_k largest (ties at the k-th value are all kept); p = softmax(z); remove the tail
// whose cumulative mass (tokens sorted by descending p) exceeds top_p, always keeping the most
// probable token; remove p < min_p * max(p); renormalise. Greedy rows (T = 0) give one-hot(argmax).
//   logits: [n, V] any float dtype; params: one per row (or one for all rows); probs: f32 [n, V].
void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs);

// Per row r: tokens[r] = the first index whose cumulative probability exceeds
// u = philox_uniform(seeds[r], counters[r], 0) * total, scanning indices in order 0..V-1
// (inverse CDF over the processed distribution). Greedy rows take the argmax of the logits.
//   logits: [n, V]; params/seeds/counters: one per row (params may hold one for all rows);
//   tokens: i32 [n] on the context's device.
void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens);

// Inverse-CDF draw from already processed probabilities probs [n, V] f32 with uniforms u [n] f32:
// tokens[r] = first i with cumsum(probs[r, :i+1]) > u[r] * sum(probs[r, :]). Building block for
// the speculative verifier's residual sampling.
void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens);

}  // namespace dspark
