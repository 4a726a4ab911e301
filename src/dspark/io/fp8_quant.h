// Hugging Face FP8 checkpoints with block scales (quant_method "fp8", as Qwen3-*-FP8 and
// DeepSeek-V3 publish them): the config.json entry and the dequantization of their weights.
//
// config.json: "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme":
// "dynamic", "weight_block_size": [BN, BK], "modules_to_not_convert": [...]} ("fmt" and
// "activation_scheme" may be absent: e4m3 and dynamic). A quantized linear `X` is two tensors:
//   X.weight            F8_E4M3 [N, K]                              E4M3 codes (core/fp8.h)
//   X.weight_scale_inv  f32 / bf16 / f16 [ceil(N / BN), ceil(K / BK)]
// and w[n][k] = e4m3(X.weight[n][k]) * X.weight_scale_inv[n / BN][k / BK] (one f32 product; the
// last block of a row or column may be partial). Embeddings, norms and usually the LM head are
// stored as floats; modules_to_not_convert lists modules kept in floats.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dspark/core/tensor.h"

namespace dspark {

struct Fp8Quantization {
  int64_t block_n = 0, block_k = 0;  // weight_block_size: rows, columns of one scale's block
  std::vector<std::string> modules_to_not_convert;
  // Whether `module` (a tensor name without ".weight") is kept in floats: an entry of
  // modules_to_not_convert is the module or a run of its dot-separated parts ("lm_head",
  // "model.layers.0.mlp", "mlp.gate").
  bool keeps_float(const std::string& module) const;
};

// The FP8 quantization of the config.json at `config_json`: nullopt when it has no
// "quantization_config" or one without "quant_method" (MLX's, io/mlx_quant.h). Throws
// ErrorKind::unsupported for a quant_method other than "fp8" (naming the supported ones), an fmt
// other than "e4m3", an activation_scheme other than "dynamic" and a missing weight_block_size
// (per-tensor scales); ErrorKind::io for a weight_block_size that is not two positive integers or a
// modules_to_not_convert that is not a list of strings.
std::optional<Fp8Quantization> read_fp8_quantization(const std::filesystem::path& config_json);

// One quantized weight's parts (CPU views: `codes` u8 [N, K], `scale_inv` a float tensor).
struct Fp8QuantTensor {
  std::string name;  // the weight's name, for errors
  int64_t block_n = 0, block_k = 0;
  Tensor codes, scale_inv;
};

// Checks the shapes of the two tensors against each other (ErrorKind::io naming the tensor and the
// expected scale shape); returns {N, K}.
std::pair<int64_t, int64_t> fp8_quant_shape(const Fp8QuantTensor& t);

// w = e4m3(code) * scale_inv in f32, [N, K] row-major into `out`.
void fp8_dequantize(const Fp8QuantTensor& t, float* out);

}  // namespace dspark
