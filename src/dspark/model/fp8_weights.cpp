#include "dspark/model/fp8_weights.h"

#include <cstdio>

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/io/safetensors.h"
#include "dspark/io/weight_names.h"

namespace dspark {
Fp8Weights::Fp8Weights(const SafeTensors& st, Fp8Quantization quantization)
    : st_(st), quantization_(std::move(quantization)) {}

bool Fp8Weights::contains(const std::string& name) const {
  return st_.contains(name);
}

std::string Fp8Weights::origin() const {
  return st_.path().string();
}

int64_t Fp8Weights::stored_bytes(const std::string& name) const {
  return safetensors_stored_bytes(st_, name, {".weight_scale_inv"});
}

int64_t Fp8Weights::total_stored_bytes() const {
  return static_cast<int64_t>(st_.total_bytes());
}

std::optional<Fp8QuantTensor> Fp8Weights::quantized(const std::string& name) const {
  if (!st_.is_e4m3(name)) return std::nullopt;
  const std::optional<std::string> module = weight_module(name);
  DSPARK_CHECK_KIND(io, module.has_value(),
                    "tensor '{}' is F8_E4M3 but is not a linear's weight (expected a name ending "
                    "in \".weight\") in {}",
                    name, origin());
  DSPARK_CHECK_KIND(io, !quantization_.keeps_float(*module),
                    "tensor '{}' is F8_E4M3 but config.json's modules_to_not_convert keeps module "
                    "'{}' in floats ({})",
                    name, *module, origin());
  const std::string scale = name + "_scale_inv";
  DSPARK_CHECK_KIND(io, st_.contains(scale),
                    "tensor '{}' is F8_E4M3 (FP8, weight_block_size [{}, {}]) but its scales "
                    "'{}' are missing in {}",
                    name, quantization_.block_n, quantization_.block_k, scale, origin());
  return Fp8QuantTensor{name, quantization_.block_n, quantization_.block_k, st_.get(name),
                        st_.get(scale)};
}

Tensor Fp8Weights::get(const std::string& name) const {
  const std::optional<Fp8QuantTensor> q = quantized(name);
  if (!q) return st_.get(name);
  const auto [n, k] = fp8_quant_shape(*q);
  std::lock_guard lock(mutex_);
  auto it = dense_.find(name);
  if (it == dense_.end()) {
    if (dense_.empty()) {
      fmt::print(stderr,
                 "dspark: {}: FP8 E4M3 weights (blocks of {}x{}) that the device's kernels do not "
                 "take are dequantized at load to the engine dtype\n",
                 origin(), quantization_.block_n, quantization_.block_k);
    }
    std::vector<float> values(static_cast<size_t>(n * k));
    fp8_dequantize(*q, values.data());
    it = dense_.emplace(name, std::move(values)).first;
  }
  return Tensor(it->second.data(), DType::f32, Shape{n, k}, Device::cpu());
}

std::optional<QuantizedView> Fp8Weights::get_quantized(const std::string& name) const {
  const std::optional<Fp8QuantTensor> q = quantized(name);
  if (!q) return std::nullopt;
  const auto [n, k] = fp8_quant_shape(*q);
  QuantizedView v;
  v.format = WeightFormat::fp8_blocks;
  v.blocks = q->codes;
  v.n = n;
  v.k = k;
  v.scales = q->scale_inv;
  v.block_n = q->block_n;
  v.block_k = q->block_k;
  return v;
}

Shape Fp8Weights::shape_of(const std::string& name) const {
  const std::optional<Fp8QuantTensor> q = quantized(name);
  if (!q) return st_.get(name).shape();
  const auto [n, k] = fp8_quant_shape(*q);
  return Shape{n, k};
}

}  // namespace dspark
