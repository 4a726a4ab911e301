// The Llama decoder family: Llama (1-3.x), Qwen2 (q/k/v bias), Qwen3 (per-head q/k RMSNorm),
// Mistral (sliding-window attention); tied or untied embeddings.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dspark/model/registry.h"

namespace dspark {

// (HF architecture name, factory) for every architecture this family serves.
std::vector<std::pair<std::string, ModelFactory>> llama_family_architectures();

}  // namespace dspark
