// load_model (model/model.h): config.json -> registered family -> weights from safetensors (MLX
// affine-quantized ones through MlxWeights, block-scaled FP8 ones through Fp8Weights); or a GGUF
// file (a .gguf path, or a directory holding one and no config.json).
#include <system_error>

#include <fmt/ranges.h>

#include "dspark/core/error.h"
#include "dspark/io/fp8_quant.h"
#include "dspark/io/gguf.h"
#include "dspark/io/mlx_quant.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/fp8_weights.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/mlx_weights.h"
#include "dspark/model/model.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {

void check_engine_dtype(Device device, DType dtype) {
  if (device.is_cuda()) {
    DSPARK_CHECK_KIND(unsupported,
                      dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f32,
                      "engine dtype {} is not supported on CUDA", dtype_name(dtype));
  }
}

}  // namespace

void with_checkpoint_weights(const std::filesystem::path& dir,
                             const std::function<void(const WeightSource&)>& fn) {
  if (const std::optional<std::filesystem::path> gguf = resolve_gguf_model(dir)) {
    const GgufFile file = GgufFile::open(*gguf);
    fn(GgufWeights(file, gguf_model_config(file)));
    return;
  }
  const SafeTensors st = SafeTensors::open(dir);
  // An MLX-quantized checkpoint (mlx-lm): its U32 weights unpacked by MlxWeights.
  if (std::optional<MlxQuantization> q = read_mlx_quantization(dir / "config.json")) {
    fn(MlxWeights(st, std::move(*q)));
    return;
  }
  // A Hugging Face FP8 checkpoint: its F8_E4M3 weights dequantized by Fp8Weights.
  if (std::optional<Fp8Quantization> q = read_fp8_quantization(dir / "config.json")) {
    fn(Fp8Weights(st, std::move(*q)));
    return;
  }
  fn(SafeTensorsWeights(st));
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Device device, DType dtype) {
  if (const std::optional<std::filesystem::path> gguf = resolve_gguf_model(dir)) {
    check_engine_dtype(device, dtype);
    const GgufFile file = GgufFile::open(*gguf);
    return load_gguf_model(file, device, dtype);
  }
  std::error_code ec;
  DSPARK_CHECK_KIND(io, std::filesystem::is_directory(dir, ec),
                    "model directory '{}' does not exist or is not a directory (or a .gguf file)",
                    dir.string());
  const ModelConfig config = load_model_config(dir);
  // Unknown architectures fail before any weight is read.
  if (find_architecture(config.architecture) == nullptr) {
    DSPARK_FAIL(unsupported, "unsupported architecture '{}' in {} (supported: {})",
                config.architecture, (dir / "config.json").string(),
                fmt::join(supported_architectures(), ", "));
  }
  check_engine_dtype(device, dtype);
  std::unique_ptr<Model> model;
  with_checkpoint_weights(
      dir, [&](const WeightSource& w) { model = create_model(config, w, device, dtype); });
  return model;
}

}  // namespace dspark
