// Losslessness: greedy speculative decoding emits exactly the plain greedy tokens, for a tiny
// golden target x every draft source (prompt lookup, another tiny model, the target itself as its
// own draft) x gamma in {1, 2, 4, 8} x 8 prompts; all prompts are decoded as one batch (rows with
// different accepted lengths) and compared with single-row plain decoding on the same device.
// Coupled sampling is checked the same way: the same seed gives the same tokens.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_source.h"

namespace dspark::test {

// A draft source for a target (built once per check; the target outlives it).
struct NamedSource {
  std::string name;
  std::function<std::unique_ptr<DraftSource>(Model& target)> make;
};

// Skips (GTEST_SKIP) when the fixture is missing.
// The engine dtype is f32 by default: the tiny fixtures' greedy margins (>= 0.079) are far above
// f32 error but not above bf16 error, and two bf16 runs with different batch shapes (a verify of
// k + 1 tokens vs a decode of one) may round differently.
void check_greedy_lossless(const std::string& model_name, Device device, DType dtype = DType::f32);

// A DSpark block drafter fixture of tests/data/drafters (e.g. "qwen3_dflash") for its target.
NamedSource dspark_fixture_source(const std::string& fixture);

// The target drafting for itself ("draft-model:self", f32 CPU copy of the fixture model),
// prompt lookup ("ngram", n-grams 1..3) and the DSpark fixture `drafter`.
std::vector<NamedSource> self_ngram_fixture_sources(const std::string& model_name,
                                                    const std::string& drafter);

// Coupled sampling (SpecSampling::coupled) reproduces plain sampling: for T in {0.7, 1.0} with
// top-p 0.9, seeds {1, 2, 3} and the 8 prompts, the speculative engine (prompt lookup, another tiny
// model, the target itself, and `extra` sources; gamma 2 and 5; all requests as one batch) and the
// engine without a source emit exactly the tokens of single-row plain generate() with the same
// seed.
void check_coupled_equals_plain(const std::string& model_name, Device device,
                                const std::vector<NamedSource>& extra = {},
                                DType dtype = DType::f32);

}  // namespace dspark::test
