#include "dspark/model/registry.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/ranges.h>

#include "dspark/core/error.h"
#include "dspark/io/safetensors.h"
#include "dspark/io/weight_names.h"
#include "dspark/model/llama_family.h"
#include "dspark/model/load_progress.h"

namespace dspark {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: usable from other static destructors
    for (const auto& [name, factory] : llama_family_architectures()) reg->factories[name] = factory;
    return reg;
  }();
  return *r;
}

}  // namespace

void register_architecture(const std::string& architecture, ModelFactory factory) {
  DSPARK_CHECK(factory != nullptr, "register_architecture({}): null factory", architecture);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[architecture] = factory;
}

ModelFactory find_architecture(const std::string& architecture) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.factories.find(architecture);
  return it == r.factories.end() ? nullptr : it->second;
}

std::vector<std::string> supported_architectures() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;  // std::map keeps them sorted
}

bool SafeTensorsWeights::contains(const std::string& name) const {
  return st_.contains(name);
}
Tensor SafeTensorsWeights::get(const std::string& name) const {
  // FP8 codes mean nothing without their block scales, which only Fp8Weights applies.
  DSPARK_CHECK_KIND(unsupported, !st_.is_e4m3(name),
                    "tensor '{}' is F8_E4M3: FP8 weights load only in a model checkpoint whose "
                    "config.json has a quantization_config with quant_method \"fp8\" (not in "
                    "DSpark / DFlash drafters) ({})",
                    name, origin());
  return st_.get(name);
}
std::string SafeTensorsWeights::origin() const {
  return st_.path().string();
}
int64_t SafeTensorsWeights::stored_bytes(const std::string& name) const {
  return safetensors_stored_bytes(st_, name);
}

int64_t safetensors_stored_bytes(const SafeTensors& st, const std::string& name,
                                 std::initializer_list<std::string_view> companion_suffixes) {
  size_t bytes = st.bytes(name);
  if (const std::optional<std::string> module = weight_module(name))
    for (std::string_view suffix : companion_suffixes)
      bytes += st.bytes(*module + std::string(suffix));
  return static_cast<int64_t>(bytes);
}
int64_t SafeTensorsWeights::total_stored_bytes() const {
  return static_cast<int64_t>(st_.total_bytes());
}

std::unique_ptr<Model> create_model(const ModelConfig& config, const SafeTensors& st, Device device,
                                    DType dtype) {
  return create_model(config, SafeTensorsWeights(st), device, dtype);
}

std::unique_ptr<Model> create_model(const ModelConfig& config, const WeightSource& weights,
                                    Device device, DType dtype) {
  const ModelFactory factory = find_architecture(config.architecture);
  if (factory == nullptr) {
    DSPARK_FAIL(unsupported, "unsupported architecture '{}' (supported: {})", config.architecture,
                fmt::join(supported_architectures(), ", "));
  }
  // The progress of this load, unless it is part of one already reporting (an MTP layer's).
  std::optional<LoadProgress> progress;
  if (!LoadProgress::active()) progress.emplace(weights.total_stored_bytes());
  std::unique_ptr<Model> model = factory(config, weights, device, dtype);
  if (progress) progress->finish();
  return model;
}

DType default_engine_dtype(Device device) {
  return device.is_cuda() ? DType::bf16 : DType::f32;
}

}  // namespace dspark
