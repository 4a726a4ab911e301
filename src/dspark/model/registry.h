// Model families keyed by the Hugging Face `architectures` string of config.json. The built-in
// families are registered explicitly (no static-initialiser tricks, which a static library drops);
// more can be added at run time with register_architecture().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"
#include "dspark/model/config.h"
#include "dspark/model/model.h"
#include "dspark/model/weight_source.h"

namespace dspark {

class SafeTensors;

// Builds a model from a parsed config and its weights (copied out: the source may be closed
// afterwards). The weights come from a safetensors checkpoint or a GGUF file (model/gguf_model.h),
// always under their Hugging Face names.
using ModelFactory = std::unique_ptr<Model> (*)(const ModelConfig& config,
                                                const WeightSource& weights, Device device,
                                                DType dtype);

// Adds (or replaces) the factory for `architecture`.
void register_architecture(const std::string& architecture, ModelFactory factory);
// Null when the architecture is unknown.
ModelFactory find_architecture(const std::string& architecture);
// Sorted names of every registered architecture.
std::vector<std::string> supported_architectures();

// The factory for config.architecture, or ErrorKind::unsupported naming the supported ones. A load
// that runs past 2 s shows its progress on stderr (model/load_progress.h).
std::unique_ptr<Model> create_model(const ModelConfig& config, const WeightSource& weights,
                                    Device device, DType dtype);
// The same for a safetensors checkpoint.
std::unique_ptr<Model> create_model(const ModelConfig& config, const SafeTensors& st, Device device,
                                    DType dtype);

// The engine dtype when the caller does not choose: f32 on the CPU, bf16 on CUDA.
DType default_engine_dtype(Device device);

}  // namespace dspark
