// Logit processing (temperature, top-k, top-p, min-p) and seeded sampling. The processed
// distribution is the one the speculative verifier compares (p for the target, q for a drafter),
// so the same function serves plain sampling and verification.
#pragma once

#include <cstdint>
#include <span>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// SamplingParams (backend/op_params.h): temperature (0: greedy), top_k, top_p, min_p.
// Throws invalid_input naming the field when a value is out of range.
void validate(const SamplingParams& params, int64_t vocab_size);

// The processing, in Hugging Face's order (temperature, top-k, top-p, min-p), defined by
// thresholds so that ties are kept together and CPU and CUDA agree exactly on the kept set:
//   z = logits / T;
//   top-k: keep x iff #{y : z(y) > z(x)} < k;
//   p = softmax(z over the kept tokens);
//   top-p: keep x iff sum{p(y) : p(y) > p(x)} < top_p   (the most probable token always stays);
//   min-p: keep x iff p(x) >= min_p * max(p);
//   renormalise over the kept tokens (removed tokens get exactly 0).
// Greedy rows (T = 0) give one-hot(argmax). Sums accumulate in double on both backends and
// exponentials use precise expf (not fast intrinsics), so CPU and CUDA agree to ~1 ulp.
// Numerics, step by step (what the CPU kernel does; the reference for the CUDA one):
//   z(x) = float(logit(x)) / T in f32 (a NaN logit counts as -inf: probability 0;
//   +inf, or an overflow of the division, counts as FLT_MAX);
//   e(x) = expf(z(x) - max z) for kept x, else 0; S = sum of e (double); p(x) = float(e(x) / S);
//   top-p compares the double sum of the f32 p(y) > p(x) with (double)top_p;
//   min-p keeps p(x) >= min_p * max(p) (the product in f32);
//   probs(x) = float(e(x) / sum of e(y) over the finally kept y) (double), 0 elsewhere.
//   A row whose logits are all -inf/NaN gives one-hot(argmax) (argmax's rules, ops/softmax.h).
//   logits: [n, V] any float dtype; params: one per row (or one for all rows); probs: f32 [n, V].
void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs);

// Per row r: tokens[r] = the first index whose cumulative probability exceeds
// u = philox_uniform(seeds[r], counters[r], 0) * total, scanning indices in order 0..V-1
// (inverse CDF over the processed distribution, cumulative sums in double; when rounding leaves
// u beyond the last cumulative value the last kept token is chosen). Greedy rows take the argmax.
//   logits: [n, V]; params/seeds/counters: one per row (params may hold one for all rows);
//   tokens: i32 [n] on the context's device.
void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens);

// Inverse-CDF draw from already processed probabilities probs [n, V] f32 with uniforms u [n] f32:
// tokens[r] = first i with cumsum(probs[r, :i+1]) > u[r] * sum(probs[r, :]). Building block for
// the speculative verifier's residual sampling. Negative entries count as 0; when rounding leaves
// the target beyond the last cumulative value, the last positive entry is chosen (0 if none).
// sample() draws exactly sample_from_probs(process_logits(logits), u) for non-greedy rows.
void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens);

}  // namespace dspark
