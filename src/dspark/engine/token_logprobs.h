// Per-token log-probabilities of generated text (OpenAI's logprobs / top_logprobs). The
// distribution is the target's at the token's position, as the sampler sees it before truncation:
//   logprob(x) = log_softmax(z)(x),  z = penalized logits / T  (T = the request's temperature; 1
//   for greedy requests, whose temperature 0 has no distribution),
// over the whole vocabulary: top_k / top_p / min_p are not applied (a cut token would have -inf,
// and the emitted token of a greedy request is always the most probable one). Penalties are the
// request's (engine/penalties.h) with the history of that position. Computed on the host from the
// logits row (copied from the device on CUDA): z in f32 as ops/sampling.h scales it, the
// log-sum-exp in double.
#pragma once

#include <cstdint>
#include <vector>

namespace dspark {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct TokenLogprobs {
  int32_t token = 0;  // the emitted token
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // the most probable tokens, descending (ties: lower id first)
};

// The entry of `chosen` from one f32 logits row of `vocab` values, with the `top_n` most probable
// tokens. NaN logits count as -inf.
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, float temperature, int32_t chosen,
                             int top_n);

}  // namespace dspark
