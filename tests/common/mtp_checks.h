// Checks of the MTP draft source (spec/mtp_source.h) shared by the CPU and CUDA suites, on the
// tiny MTP fixtures tests/data/models/<family>_mtp (tools/mtp/make_mtp_fixtures.py).
#pragma once

#include <filesystem>
#include <string>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"

namespace dspark::test {

std::filesystem::path mtp_fixture_dir(const std::string& family);  // "deepseek_v3", "glm4_moe"

// The MTP fixture of `family` rewritten as a deterministic bigram chain that its MTP layer
// predicts exactly: every attention output and FFN down projection (target and MTP layer) zero,
// so the target's next token depends only on the current one (lm_head(norm(embed(t)))); eh_proj
// = [I | 0], enorm 1, shared_head.norm / head = the target's final norm / LM head, so the MTP
// layer's logits for t_{i+1} are the target's for it. Written under `out` (created); returns it.
std::filesystem::path write_bigram_mtp_fixture(const std::string& family,
                                               const std::filesystem::path& out);

struct MtpLosslessStats {
  long long drafted = 0, accepted = 0;
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0; }
};

// Greedy speculative decoding with the MTP source (gamma 1, 2, 3, 5; the prompts as one batch,
// prefilled in chunks of 7 tokens) emits exactly the plain greedy tokens; and with coupled
// sampling (T 0.8, top-p 0.9, gamma 3) exactly plain sampling's tokens of the same seed. Returns
// the greedy rounds' draft counts.
MtpLosslessStats check_mtp_lossless(const std::filesystem::path& model_dir, Device device,
                                    DType dtype = DType::f32);

}  // namespace dspark::test
