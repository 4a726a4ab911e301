// Hugging Face FP8 checkpoints with block scales (io/fp8_quant.h) as a WeightSource: the F8_E4M3
// weights as stored (get_quantized: codes and block scales, which the model keeps in memory and
// multiplies with natively, WeightFormat::fp8_blocks), or dequantized to f32 (get: w =
// e4m3(code) * weight_scale_inv of its block) where a model loads them dense. See
// docs/quantization.md.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dspark/io/fp8_quant.h"
#include "dspark/model/weight_source.h"

namespace dspark {

class SafeTensors;

class Fp8Weights final : public WeightSource {
 public:
  // `st` must outlive the source.
  Fp8Weights(const SafeTensors& st, Fp8Quantization quantization);
  bool contains(const std::string& name) const override;
  // Float tensors as stored; F8_E4M3 weights dequantized to f32, kept until the source is
  // destroyed (the first one says so once on stderr).
  Tensor get(const std::string& name) const override;
  Shape shape_of(const std::string& name) const override;
  std::string origin() const override;
  // The weight with its companion tensors (.weight_scale_inv).
  int64_t stored_bytes(const std::string& name) const override;
  int64_t total_stored_bytes() const override;
  // F8_E4M3 weights as stored (WeightFormat::fp8_blocks), nullopt for other tensors.
  std::optional<QuantizedView> get_quantized(const std::string& name) const override;

 private:
  // The parts of the F8_E4M3 weight `name`, nullopt for a tensor not stored as F8_E4M3. Throws
  // ErrorKind::io naming the tensor when it is not a ".weight", its module is listed in
  // modules_to_not_convert, or its weight_scale_inv is missing.
  std::optional<Fp8QuantTensor> quantized(const std::string& name) const;

  const SafeTensors& st_;
  Fp8Quantization quantization_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::vector<float>> dense_;
};

}  // namespace dspark
