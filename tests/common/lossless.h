// Losslessness: greedy speculative decoding emits exactly the plain greedy tokens, for a tiny
// golden target x every draft source (prompt lookup, another tiny model, the target itself as its
// own draft) x gamma in {1, 2, 4, 8} x 8 prompts; all prompts are decoded as one batch (rows with
// different accepted lengths) and compared with single-row plain decoding on the same device.
#pragma once

#include <string>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"

namespace dspark::test {

// Skips (GTEST_SKIP) when the fixture is missing.
// The engine dtype is f32 by default: the tiny fixtures' greedy margins (>= 0.079) are far above
// f32 error but not above bf16 error, and two bf16 runs with different batch shapes (a verify of
// k + 1 tokens vs a decode of one) may round differently.
void check_greedy_lossless(const std::string& model_name, Device device, DType dtype = DType::f32);

}  // namespace dspark::test
