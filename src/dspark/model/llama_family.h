// The Llama decoder family: Llama (1-3.x), Qwen2 (q/k/v bias), Qwen3 (per-head q/k RMSNorm),
// Mistral (sliding-window attention), Qwen3-MoE (Qwen3 with expert FFNs, model/moe.h); tied or
// untied embeddings.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dspark/model/registry.h"
#include "dspark/ops/rope.h"

namespace dspark {

class WeightLoader;

// (HF architecture name, factory) for every architecture this family serves.
std::vector<std::pair<std::string, ModelFactory>> llama_family_architectures();

// The optional tensors a family checkpoint carries, from its architecture's traits and its config
// (what the model loads); nullopt when the architecture is not one of the family's.
struct LlamaFamilyTensors {
  bool qkv_bias = false;  // q/k/v_proj.bias
  bool o_bias = false;    // o_proj.bias
  bool qk_norm = false;   // q_norm / k_norm (per head)
};
std::optional<LlamaFamilyTensors> llama_family_tensors(const ModelConfig& config);

// The family's rotation table: the config's, divided by a GGUF's per-frequency factors
// (`rope_freqs.weight`, how GGUF files of Llama 3.x store the llama3 scaling) when present.
RopeTable llama_family_rope_table(const ModelConfig& config, const WeightLoader& weights);

}  // namespace dspark
