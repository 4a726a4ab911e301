// dspark info: the config summary of a model directory (no weights are loaded).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"

namespace dspark::cli {
namespace {

struct InfoArgs {
  std::string model_dir;
  bool json = false;
};

std::string windows_summary(const std::vector<int>& w) {
  int n_sliding = 0, window = 0;
  for (int x : w) {
    if (x > 0) {
      ++n_sliding;
      window = x;
    }
  }
  if (n_sliding == 0) return "none";
  return fmt::format("{} of {} layers, window {}", n_sliding, w.size(), window);
}

int run_info(const InfoArgs& a) {
  // A GGUF file (or a directory holding one and no config.json), else a Hugging Face directory.
  const std::optional<std::filesystem::path> gguf = resolve_gguf_model(a.model_dir);
  std::error_code ec;
  DSPARK_CHECK_KIND(io, gguf || std::filesystem::is_directory(a.model_dir, ec),
                    "model directory '{}' does not exist or is not a directory (or a .gguf file)",
                    a.model_dir);
  const ModelConfig c =
      gguf ? gguf_model_config(GgufFile::open(*gguf)) : load_model_config(a.model_dir);
  const GenerationDefaults g = load_generation_defaults(a.model_dir);
  const bool supported = find_architecture(c.architecture) != nullptr;
  // Per layer: attention, then a dense MLP or, in a MoE layer, the router and every expert.
  const int moe_layers = static_cast<int>(std::count(c.layer_moe.begin(), c.layer_moe.end(), true));
  const int64_t expert_params = 3LL * c.hidden_size * c.moe_intermediate_size;
  // MLA (DeepSeek): q (LoRA or full), the latent projection, kv_b_proj and o_proj.
  const int64_t h = c.hidden_size, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  const int64_t attention_params =
      c.mla()
          ? (c.q_lora_rank > 0 ? c.q_lora_rank * (h + c.num_heads * qk) : h * c.num_heads * qk) +
                h * (c.kv_lora_rank + c.qk_rope_head_dim) +
                c.kv_lora_rank * c.num_heads * (c.qk_nope_head_dim + c.v_head_dim) +
                c.num_heads * c.v_head_dim * h
          : h * c.head_dim * (2 * c.num_heads + 2 * c.num_kv_heads);
  const int64_t shared_expert_params = 3LL * h * c.moe_intermediate_size * c.n_shared_experts;
  const int64_t params_est =
      2LL * c.vocab_size * c.hidden_size / (c.tie_word_embeddings ? 2 : 1) +
      static_cast<int64_t>(c.num_layers) * attention_params +
      static_cast<int64_t>(c.num_layers - moe_layers) * 3LL * c.hidden_size * c.intermediate_size +
      static_cast<int64_t>(moe_layers) *
          (static_cast<int64_t>(c.num_experts) * (c.hidden_size + expert_params) +
           shared_expert_params);
  if (a.json) {
    nlohmann::json j = {{"architecture", c.architecture},
                        {"supported", supported},
                        {"model_type", c.model_type},
                        {"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_layers", c.num_layers},
                        {"num_heads", c.num_heads},
                        {"num_kv_heads", c.num_kv_heads},
                        {"head_dim", c.head_dim},
                        {"rope_theta", c.rope_theta},
                        {"rope_scaling", c.rope_scaling.type},
                        {"max_position_embeddings", c.max_position_embeddings},
                        {"tie_word_embeddings", c.tie_word_embeddings},
                        {"attention_bias", c.attention_bias},
                        {"qk_norm", c.qk_norm},
                        {"layer_window", c.layer_window},
                        {"torch_dtype", dtype_name(c.torch_dtype)},
                        {"eos_token_ids", c.eos_token_ids},
                        {"parameters_estimate", params_est},
                        {"num_experts", c.num_experts},
                        {"num_experts_per_tok", c.num_experts_per_tok},
                        {"moe_intermediate_size", c.moe_intermediate_size},
                        {"norm_topk_prob", c.norm_topk_prob},
                        {"moe_layers", moe_layers}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  fmt::print("architecture       {}{}\n", c.architecture, supported ? "" : "  (not supported)");
  fmt::print("model_type         {}\n", c.model_type);
  fmt::print("parameters         ~{:.1f}M\n", static_cast<double>(params_est) / 1e6);
  fmt::print("vocab_size         {}\n", c.vocab_size);
  fmt::print("hidden_size        {}\n", c.hidden_size);
  fmt::print("intermediate_size  {}\n", c.intermediate_size);
  fmt::print("layers             {}\n", c.num_layers);
  fmt::print("heads              {} (kv {}, head_dim {})\n", c.num_heads, c.num_kv_heads,
             c.head_dim);
  fmt::print("rope               theta {}, scaling {}{}\n", c.rope_theta, c.rope_scaling.type,
             c.rope_scaling.type == "default" ? "" : fmt::format(" x{}", c.rope_scaling.factor));
  fmt::print("max_positions      {}\n", c.max_position_embeddings);
  fmt::print("sliding_window     {}\n", windows_summary(c.layer_window));
  fmt::print("tied_embeddings    {}\n", c.tie_word_embeddings);
  fmt::print("qkv_bias / qk_norm {} / {}\n", c.attention_bias, c.qk_norm);
  if (moe_layers > 0) {
    fmt::print("experts            {} of width {}, top-{}{}, in {} of {} layers\n", c.num_experts,
               c.moe_intermediate_size, c.num_experts_per_tok,
               c.norm_topk_prob ? " renormalised" : "", moe_layers, c.num_layers);
  }
  fmt::print("torch_dtype        {}\n", dtype_name(c.torch_dtype));
  fmt::print("eos_token_ids      [{}]\n", fmt::join(c.eos_token_ids, ", "));
  auto opt = [](double v) { return v < 0 ? std::string("unset") : fmt::format("{}", v); };
  fmt::print("generation         do_sample {}, temperature {}, top_k {}, top_p {}, min_p {}\n",
             g.do_sample, opt(g.temperature), opt(g.top_k), opt(g.top_p), opt(g.min_p));
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* sub = app.add_subcommand("info", "Print the config summary of a model directory");
  sub->add_option("-m,--model", args->model_dir, "Model directory or .gguf file")->required();
  sub->add_flag("--json", args->json, "Print the summary as one JSON object");
  return [args] { return run_info(*args); };
}

}  // namespace dspark::cli
