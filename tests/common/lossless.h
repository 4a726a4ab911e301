// Losslessness: greedy speculative decoding emits exactly the plain greedy tokens, for a tiny
// golden target x every draft source (prompt lookup, another tiny model, the target itself as its
// own draft) x gamma in {1, 2, 4, 8} x 8 prompts; all prompts are decoded as one batch (rows with
// different accepted lengths) and compared with single-row plain decoding on the same device.
#pragma once

#include <string>

#include "dspark/core/device.h"

namespace dspark::test {

// Skips (GTEST_SKIP) when the fixture is missing.
void check_greedy_lossless(const std::string& model_name, Device device);

}  // namespace dspark::test
