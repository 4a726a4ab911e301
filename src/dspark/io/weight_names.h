// Tensor names of linear weights ("<module>.weight"): quantized checkpoints (MLX, FP8) key their
// per-module settings by the module, the name less its ".weight".
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dspark {

// The module of the weight tensor `name` ("model.layers.0.mlp.up_proj" for
// "model.layers.0.mlp.up_proj.weight"); nullopt when `name` does not end in ".weight".
inline std::optional<std::string> weight_module(std::string_view name) {
  constexpr std::string_view kSuffix = ".weight";
  if (!name.ends_with(kSuffix)) return std::nullopt;
  return std::string(name.substr(0, name.size() - kSuffix.size()));
}

}  // namespace dspark
