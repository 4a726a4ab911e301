// Where a model family reads its weights from: a safetensors checkpoint (zero-copy views of the
// mapping) or a GGUF file (tensors dequantized to f32, names mapped to the Hugging Face ones).
// Families ask for tensors by their Hugging Face names and never see the storage format.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "dspark/backend/op_params.h"
#include "dspark/core/quant.h"
#include "dspark/core/tensor.h"

namespace dspark {

class SafeTensors;

// A 2-D weight stored in a block-quantized format, CPU views valid while the source lives:
//  - WeightFormat::blocks (core/quant.h): `blocks` u8 [n, quant_row_bytes(quant, k)];
//  - WeightFormat::fp8_blocks (io/fp8_quant.h): `blocks` u8 [n, k] E4M3 codes, `scales` any float
//    dtype [ceil(n / block_n), ceil(k / block_k)].
struct QuantizedView {
  WeightFormat format = WeightFormat::blocks;
  QuantType quant = QuantType::q8_0;
  Tensor blocks;
  int64_t n = 0, k = 0;
  Tensor scales;
  int64_t block_n = 0, block_k = 0;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool contains(const std::string& name) const = 0;
  // A CPU view of the tensor (a float dtype for weights), valid while the source lives. Throws
  // ErrorKind::io naming the tensor and origin() when it is absent.
  virtual Tensor get(const std::string& name) const = 0;
  // The tensor's logical shape (a quantized weight's [rows, values per row]) without
  // dequantizing it.
  virtual Shape shape_of(const std::string& name) const { return get(name).shape(); }
  // The file or directory, for error messages.
  virtual std::string origin() const = 0;
  // The tensor's blocks as stored when it is a block-quantized 2-D weight (a GGUF file's Q4_K,
  // Q8_0, ..., an FP8 checkpoint's E4M3 codes with their block scales), in the Hugging Face row
  // order; nullopt for float tensors and sources without quantized storage.
  virtual std::optional<QuantizedView> get_quantized(const std::string& name) const {
    (void)name;
    return std::nullopt;
  }
  // The bytes tensor `name` takes in the checkpoint (with the scales a quantized weight carries),
  // and those of the whole checkpoint: the measure of a load's progress (model/load_progress.h).
  // 0: unknown.
  virtual int64_t stored_bytes(const std::string& name) const {
    (void)name;
    return 0;
  }
  virtual int64_t total_stored_bytes() const { return 0; }
};

// WeightSource::stored_bytes of a safetensors checkpoint: tensor `name`'s bytes plus, for a
// "<module>.weight", those of the module's companion tensors "<module><suffix>" (MLX's ".scales"
// and ".biases", FP8's ".weight_scale_inv").
int64_t safetensors_stored_bytes(const SafeTensors& st, const std::string& name,
                                 std::initializer_list<std::string_view> companion_suffixes = {});

// A SafeTensors checkpoint as a WeightSource (it must outlive the adapter).
class SafeTensorsWeights final : public WeightSource {
 public:
  explicit SafeTensorsWeights(const SafeTensors& st) : st_(st) {}
  bool contains(const std::string& name) const override;
  Tensor get(const std::string& name) const override;
  std::string origin() const override;
  int64_t stored_bytes(const std::string& name) const override;
  int64_t total_stored_bytes() const override;

 private:
  const SafeTensors& st_;
};

}  // namespace dspark
