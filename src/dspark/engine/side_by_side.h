// Plain and speculative decoding of the same prompt in one process, for `dspark demo` (`make run`):
// the speculative run streams its text, the plain run is the reference and the baseline. Greedy
// runs must give identical tokens (speculative decoding is lossless); the comparison says so.
#pragma once

#include <cstdint>
#include <vector>

#include "dspark/engine/speculative.h"
#include "dspark/engine/text_generation.h"

namespace dspark {

struct SideBySideResult {
  RequestOutput speculative;  // result + telemetry
  GenerateResult plain;
  bool identical = false;  // same generated tokens
  // Decode throughput of each run: tokens after the first / time after the first token.
  double plain_tok_per_s = 0;
  double spec_tok_per_s = 0;
  double speedup() const { return plain_tok_per_s > 0 ? spec_tok_per_s / plain_tok_per_s : 0; }
};

// prompt: token ids (already rendered and encoded). A short untimed warm-up runs first (weights
// paged in, kernels and handles initialised) so neither timed run pays those costs. on_text
// receives the speculative run's text (it runs first, then the plain one).
SideBySideResult run_side_by_side(TextModel& tm, Context& ctx, const std::vector<int32_t>& prompt,
                                  const GenerateOptions& options, DraftSource* source,
                                  const SpecConfig& config, TextCallback on_text);

}  // namespace dspark
