#include "dspark/model/mlx_weights.h"

#include <cstdio>

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/io/safetensors.h"
#include "dspark/io/weight_names.h"

namespace dspark {
MlxWeights::MlxWeights(const SafeTensors& st, MlxQuantization quantization)
    : st_(st), quantization_(std::move(quantization)) {}

bool MlxWeights::contains(const std::string& name) const {
  return st_.contains(name);
}

std::string MlxWeights::origin() const {
  return st_.path().string();
}

int64_t MlxWeights::stored_bytes(const std::string& name) const {
  return safetensors_stored_bytes(st_, name, {".scales", ".biases"});
}

int64_t MlxWeights::total_stored_bytes() const {
  return static_cast<int64_t>(st_.total_bytes());
}

std::optional<MlxQuantTensor> MlxWeights::quantized(const std::string& name) const {
  const Tensor w = st_.get(name);
  if (dtype_is_float(w.dtype())) return std::nullopt;
  const std::optional<std::string> linear = weight_module(name);
  if (w.dtype() != DType::i32 || !linear) return std::nullopt;
  const std::string& module = *linear;
  const std::optional<MlxQuantSpec> spec = quantization_.spec_of(module);
  DSPARK_CHECK_KIND(io, spec.has_value(),
                    "tensor '{}' is U32 (MLX-quantized) but config.json's quantization marks "
                    "module '{}' as not quantized ({})",
                    name, module, origin());
  check_mlx_quant_spec(name, *spec);
  for (const char* part : {".scales", ".biases"}) {
    DSPARK_CHECK_KIND(io, st_.contains(module + part),
                      "tensor '{}' is MLX-quantized (U32, bits {}, group_size {}) but its "
                      "companion '{}{}' is missing in {}",
                      name, spec->bits, spec->group_size, module, part, origin());
  }
  return MlxQuantTensor{name, *spec, w, st_.get(module + ".scales"), st_.get(module + ".biases")};
}

Tensor MlxWeights::get(const std::string& name) const {
  const std::optional<MlxQuantTensor> q = quantized(name);
  if (!q) return st_.get(name);
  const auto [rows, cols] = mlx_quant_shape(*q);
  std::lock_guard lock(mutex_);
  auto it = dense_.find(name);
  if (it == dense_.end()) {
    std::vector<float> values(static_cast<size_t>(rows * cols));
    mlx_dequantize(*q, values.data());
    it = dense_.emplace(name, std::move(values)).first;
  }
  return Tensor(it->second.data(), DType::f32, Shape{rows, cols}, Device::cpu());
}

Shape MlxWeights::shape_of(const std::string& name) const {
  const std::optional<MlxQuantTensor> q = quantized(name);
  if (!q) return st_.get(name).shape();
  const auto [rows, cols] = mlx_quant_shape(*q);
  return Shape{rows, cols};
}

std::optional<QuantizedView> MlxWeights::get_quantized(const std::string& name) const {
  if (!st_.contains(name)) return std::nullopt;
  const std::optional<MlxQuantTensor> q = quantized(name);
  if (!q) return std::nullopt;
  const auto [rows, cols] = mlx_quant_shape(*q);
  const QuantType type = mlx_block_type(q->spec);
  const int64_t row_bytes = quant_row_bytes(type, cols);
  std::lock_guard lock(mutex_);
  if (not_exact_.count(name) != 0) return std::nullopt;
  auto it = blocks_.find(name);
  if (it == blocks_.end()) {
    std::vector<uint8_t> blocks(static_cast<size_t>(rows * row_bytes));
    if (!mlx_repack_blocks(*q, blocks.data())) {
      not_exact_.insert(name);
      fmt::print(stderr,
                 "dspark: '{}': an MLX scale or bias is not exact in f16; the tensor is "
                 "dequantized at load instead of kept as {} blocks\n",
                 name, quant_type_name(type));
      return std::nullopt;
    }
    it = blocks_.emplace(name, std::move(blocks)).first;
  }
  QuantizedView v;
  v.quant = type;
  v.n = rows;
  v.k = cols;
  v.blocks = Tensor(it->second.data(), DType::u8, Shape{rows, row_bytes}, Device::cpu());
  return v;
}

}  // namespace dspark
