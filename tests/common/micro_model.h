// Writes micro random-weight Llama checkpoints (config.json + model.safetensors) for tests that
// need a model with a tiny vocabulary (e.g. exact distribution tests over all token triples).
#pragma once

#include <cstdint>
#include <filesystem>

namespace dspark::test {

struct MicroModelSpec {
  int vocab = 8;
  int hidden = 16;
  int layers = 2;
  int heads = 2;
  int kv_heads = 1;
  int head_dim = 8;
  int intermediate = 32;
  uint32_t seed = 1;
  float std = 0.5f;  // weight scale (large: peaky but not degenerate distributions)
};

// Creates `dir` (replacing its files) and writes the checkpoint there.
void write_micro_llama(const std::filesystem::path& dir, const MicroModelSpec& spec);

}  // namespace dspark::test
