// GGUF files for the tests: the fixture checkpoints written at test time as llama.cpp's converter
// lays them out (tools/gguf/make_fixtures.py --deepseek-moe, with the `gguf` package, so the
// reference is independent of our C++), and DeepSeek-style metadata written by our own writer to
// read configs back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dspark/io/gguf.h"
#include "dspark/model/config.h"

namespace dspark::test {

// True when python3 imports gguf, numpy and safetensors (tests that need it skip otherwise).
bool python_has_gguf();

// Writes the checkpoint directory `src` as the GGUF file `out` of llama.cpp architecture `arch`
// (deepseek2 / glm4moe / glm-dsa); with q8_0 its matrices in Q8_0. A failure is a fatal gtest
// failure (check HasFatalFailure()).
void write_deepseek_moe_gguf(const std::filesystem::path& src, const std::filesystem::path& out,
                             const std::string& arch, bool q8_0 = false);

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

// `arch`.* metadata of a tiny MLA + DeepSeek MoE model as llama.cpp's deepseek2 converter writes
// it: block_count 3 with one next-token layer (2 decoder layers), hidden 64, 4 heads, q LoRA 48,
// latent 32 + rope 8, nope 16, v 16, YaRN (factor 4, log multiplier 0.08), 8 experts in 4 groups
// of 2 (2 kept, 1 shared), `dense_layers` leading dense layers; expert_gating_func `gating`
// (nullopt: absent).
GgufMetadata deepseek_metadata(const std::string& arch, std::optional<int64_t> gating,
                               int64_t dense_layers);

// gguf_model_config of a file holding `metadata` and a 1-value F32 tensor of each of `tensors`.
ModelConfig config_from_metadata(const GgufMetadata& metadata,
                                 const std::vector<std::string>& tensors = {});

// The hyper-parameters a GGUF config shares with the Hugging Face one it was converted from
// (gtest expectations).
void expect_same_hyper_parameters(const ModelConfig& c, const ModelConfig& hf);

}  // namespace dspark::test
