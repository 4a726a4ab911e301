// dspark quantize: a float Hugging Face checkpoint written as an MLX affine-quantized one
// (model/quantize_checkpoint.h; a DFlash / DSpark drafter with spec/dspark/quantize_drafter.h's
// policy and check) or as a GGUF file (model/gguf_export.h), with a progress bar on stderr and a
// summary on stdout.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "dspark/core/error.h"
#include "dspark/core/progress_bar.h"
#include "dspark/core/quant.h"
#include "dspark/io/mlx_quant.h"
#include "dspark/model/gguf_export.h"
#include "dspark/model/quantize_checkpoint.h"
#include "dspark/spec/dspark/drafter_config.h"
#include "dspark/spec/dspark/quantize_drafter.h"

namespace dspark::cli {
namespace {

struct QuantizeArgs {
  std::string model_dir;
  std::string output;
  std::string format = "mlx4";
  int group_size = 64;
};

int run_quantize(const QuantizeArgs& a) {
  QuantizeOptions o;
  o.input = a.model_dir;
  o.output = a.output;
  // A DFlash / DSpark drafter gets the drafter policy and a check of what was written.
  const bool drafter = is_block_drafter_dir(o.input);
  const std::optional<GgufFormat> gguf = gguf_format(a.format);
  DSPARK_CHECK_KIND(unsupported, !(gguf && drafter),
                    "--format {}: a DFlash/DSpark drafter is written as mlx4 or mlx8 (drafters "
                    "load from safetensors)",
                    a.format);
  if (!gguf) o.spec = MlxQuantSpec{mlx_format_bits(a.format), a.group_size};
  ProgressBar bar(stderr, "tensors");
  const auto progress = [&](const QuantizeProgress& p) {
    bar.update(p.tensors_done, p.tensors_total, p.bytes_done, p.bytes_total, p.tensor);
  };
  const QuantizeSummary s = gguf      ? export_gguf(o, *gguf, progress)
                            : drafter ? quantize_drafter(o, progress)
                                      : quantize_checkpoint(o, progress);
  bar.finish();
  // GGUF formats hold blocks of 32 or 256 values (a mix's fallback types: 32), MLX ones groups.
  const int group = gguf ? static_cast<int>(quant_block(gguf->base).elements) : a.group_size;
  const char* unit = gguf ? "blocks" : "groups";
  if (!s.not_divisible.empty()) {
    fmt::print(stderr,
               "dspark quantize: {} weights kept float: last dim not a multiple of {} of {} "
               "(first: {})\n",
               s.not_divisible.size(), unit, group, s.not_divisible.front());
  }
  fmt::print(
      "{}: {} weights quantized ({}, {} of {}), {} tensors copied, {:.2f} MB -> "
      "{:.2f} MB in {} file(s); copied {}\n",
      a.output, s.n_quantized, a.format, unit, group, s.n_copied,
      static_cast<double>(s.bytes_in) / 1e6, static_cast<double>(s.bytes_out) / 1e6, s.files.size(),
      s.copied_files.empty() ? "no side files"
                             : fmt::format("{}", fmt::join(s.copied_files, ", ")));
  if (drafter) {
    const DrafterSmokeTest t = drafter_smoke_test(o.output);
    fmt::print(
        "drafter policy: {} confidence-head weight(s) kept as stored; reloaded: one row of "
        "{} tap features through the context projection and {} layers' K/V (features RMS "
        "{:.4g}, K/V RMS {:.4g}, {} matrices held as {} blocks)\n",
        s.kept_by_policy.size(), t.features, t.layers, t.features_rms, t.kv_rms,
        t.matrices_as_blocks, quant_type_name(mlx_block_type(o.spec)));
  }
  return 0;
}

}  // namespace

Command add_quantize_command(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* sub = app.add_subcommand(
      "quantize", "Write a float checkpoint as an MLX affine-quantized one (mlx-lm layout)");
  sub->add_option("-m,--model", args->model_dir, "Hugging Face checkpoint directory (float)")
      ->required();
  sub->add_option("-o,--output", args->output, "Output directory (must not exist, or be empty)")
      ->required();
  sub->add_option("--format", args->format,
                  "Output format: mlx4 or mlx8 (MLX affine 4 / 8 bits); q8_0, q4_0, q4_1, "
                  "q5_0, q5_1, q4_k, q5_k or q6_k (a GGUF file of a Llama-family, Qwen3-MoE, "
                  "DeepSeek-V3 or GLM model, every weight in that type, MoE routers F32); "
                  "q4_k_m or q5_k_m (a GGUF file, llama-quantize's medium mix: the LM head and "
                  "some layers' v_proj / down_proj in Q6_K)")
      ->check(CLI::IsMember({"mlx4", "mlx8", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k",
                             "q6_k", "q4_k_m", "q5_k_m"}))
      ->capture_default_str();
  sub->add_option("--group-size", args->group_size,
                  "MLX formats: values per scale and bias, 32, 64 or 128 (GGUF blocks: 32 or 256)")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  return [args] { return run_quantize(*args); };
}

}  // namespace dspark::cli
