// `dspark quantize`: a float Hugging Face safetensors checkpoint written as an MLX affine-quantized
// one (mlx-lm's layout, read back by model/mlx_weights.h). See docs/quantization.md.
//
// Which tensors are quantized (mlx-lm's rule: Linear and Embedding weights whose last dim is a
// multiple of the group size): every 2-D float `*.weight` tensor, unless `keep_float` names its
// module or its last dim is not a multiple of the group size (both stay float as stored, and get
// a `false` entry in config.json's quantization). Everything else (norms, biases, integer
// tensors) is copied as stored. Scales and biases are stored in the weight's dtype when it is
// bf16 or f16 (as MLX does), and in bf16 for f32 weights (an f32 scale is rarely exact in f16,
// which dspark's Q4_1 repack of 4-bit weights needs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dspark/io/mlx_quant.h"

namespace dspark {

struct QuantizeOptions {
  std::filesystem::path input;   // a Hugging Face checkpoint directory (config.json, safetensors)
  std::filesystem::path output;  // created; must not exist or be empty
  MlxQuantSpec spec;             // bits 4 or 8, group 32, 64 or 128 (check_mlx_quant_spec)
  // Modules (tensor names without ".weight") to keep float although their shape qualifies.
  std::function<bool(std::string_view module)> keep_float;
  // Output files above this size are split into shards (mlx-lm's 5 GB).
  int64_t max_shard_bytes = int64_t{5} << 30;
};

struct QuantizeProgress {
  int64_t tensors_done = 0, tensors_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;  // of the source tensors
  std::string_view tensor;                  // the one just written
};

struct QuantizeSummary {
  int64_t n_quantized = 0;  // 2-D weights written quantized
  int64_t n_copied = 0;     // tensors written as stored
  int64_t bytes_in = 0, bytes_out = 0;
  std::vector<std::string> kept_by_policy;   // weights kept float by keep_float
  std::vector<std::string> not_divisible;    // weights kept float: last dim % group_size != 0
  std::vector<std::filesystem::path> files;  // the safetensors files written
  std::vector<std::string> copied_files;     // tokenizer and other side files copied
};

// The checks every output format makes: `input` is a directory with a config.json that has no
// "quantization" / "quantization_config" entry (ErrorKind::io / unsupported as
// quantize_checkpoint says).
void check_quantize_input(const std::filesystem::path& input);

// The output directory of a quantization: it must not exist or be empty (ErrorKind::io), and is
// created. Until commit() the destructor takes back what was written (the directory's contents,
// and the directory itself when this created it), so a failed run leaves no partial checkpoint.
class QuantizeOutput {
 public:
  explicit QuantizeOutput(std::filesystem::path output);
  ~QuantizeOutput();
  QuantizeOutput(const QuantizeOutput&) = delete;
  QuantizeOutput& operator=(const QuantizeOutput&) = delete;
  void commit() { committed_ = true; }

 private:
  std::filesystem::path output_;
  bool created_ = false, committed_ = false;
};

// Throws ErrorKind::invalid_input naming the weight when one of its n values is NaN or infinite
// (a damaged checkpoint: no quantized format represents it).
void check_finite_weight(const std::string& name, const float* w, int64_t n);

// The bits of an output format name: "mlx4" -> 4, "mlx8" -> 8. Throws ErrorKind::unsupported
// naming the format and the supported ones.
int mlx_format_bits(std::string_view format);

// Quantizes options.input into options.output. Throws ErrorKind::io for a missing or unreadable
// input (naming it), an output that exists and is not empty, and ErrorKind::unsupported for a
// source that is already quantized (a "quantization" / "quantization_config" entry in its
// config.json, or a non-float weight) and for an unsupported spec. `progress` (optional) is
// called once before the first tensor and after each one.
QuantizeSummary quantize_checkpoint(const QuantizeOptions& options,
                                    const std::function<void(const QuantizeProgress&)>& progress);

}  // namespace dspark
