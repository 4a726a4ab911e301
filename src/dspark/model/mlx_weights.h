// MLX-quantized Hugging Face checkpoints (mlx-lm, io/mlx_quant.h) as a WeightSource: weights
// repacked into one block per group (mlx_block_type: GGUF Q4_1 / Q8_A for groups of 32, Q4_A64 /
// Q8_A64 / Q4_A128 / Q8_A128 for 64 and 128; core/quant.h; run by the block kernels as a GGUF
// file's are), the file's bytes; weights whose scales or biases are not exact in f16 dequantized
// to f32 at load. See docs/quantization.md.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dspark/io/mlx_quant.h"
#include "dspark/model/weight_source.h"

namespace dspark {

class MlxWeights final : public WeightSource {
 public:
  // `st` must outlive the source.
  MlxWeights(const SafeTensors& st, MlxQuantization quantization);
  bool contains(const std::string& name) const override;
  // Float tensors as stored; quantized ones dequantized to f32 (scale * q + bias), kept until the
  // source is destroyed.
  Tensor get(const std::string& name) const override;
  Shape shape_of(const std::string& name) const override;
  std::string origin() const override;
  // The weight with its companion tensors (.scales, .biases).
  int64_t stored_bytes(const std::string& name) const override;
  int64_t total_stored_bytes() const override;
  // The weight as blocks of mlx_block_type(its spec) (kept until the source is destroyed);
  // nullopt for float tensors and for those whose scales / biases do not convert to f16 exactly
  // (said once on stderr, naming the tensor).
  std::optional<QuantizedView> get_quantized(const std::string& name) const override;

 private:
  // The three tensors of the quantized weight `name` (its U32 words, scales, biases), nullopt for
  // a float tensor. Throws ErrorKind::io when a companion is missing or the config marks the
  // module unquantized, and for an unsupported bits / group size.
  std::optional<MlxQuantTensor> quantized(const std::string& name) const;

  const SafeTensors& st_;
  MlxQuantization quantization_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::vector<float>> dense_;
  mutable std::map<std::string, std::vector<uint8_t>> blocks_;
  mutable std::set<std::string> not_exact_;
};

}  // namespace dspark
