// Exactness of sampling through the engine, shared by the sampling tests of every draft source:
// the exact distribution of the first three generated tokens of a micro model (enumerated with
// plain forwards of every prefix, processed by an independent double-precision implementation of
// the temperature / top-k / top-p rules), and the observed one from the speculative engine.
#pragma once

#include <cstdint>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/model/model.h"
#include "dspark/ops/sampling.h"
#include "dspark/spec/draft_source.h"
#include "dspark/spec/telemetry.h"

namespace dspark::test {

// Temperature / top-k / top-p processing of one logits row in double (T > 0).
std::vector<double> processed_probs(const std::vector<float>& logits, const SamplingParams& sp);

// P(first three tokens = a, b, c) at index (a * V + b) * V + c, for a model with vocabulary V.
std::vector<double> exact_joint3(Model& model, Context& ctx, const std::vector<int32_t>& prompt,
                                 const SamplingParams& sp);

struct Joint3Run {
  std::vector<int64_t> observed;  // counts, indexed like exact_joint3
  SpecTelemetry spec;             // merged over all requests
};

// n_samples requests of `prompt` (seed = f(index, seed_salt), max_tokens, no EOS) through the
// speculative engine with `source` (null: plain), in batches; counts their first three tokens.
Joint3Run sample_joint3(Model& model, Context& ctx, DraftSource* source,
                        const std::vector<int32_t>& prompt, const SamplingParams& sp,
                        int64_t n_samples, int gamma, int max_tokens, uint64_t seed_salt);

}  // namespace dspark::test
