#include "dspark/model/gguf_export_deepseek.h"

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/io/gguf_writer.h"

namespace dspark {

std::string deepseek_gguf_architecture(const ModelConfig& c) {
  if (c.architecture == "DeepseekV3ForCausalLM") return "deepseek2";
  if (c.architecture == "Glm4MoeForCausalLM") return "glm4moe";
  if (c.architecture == "GlmMoeDsaForCausalLM") return "glm-dsa";
  return "";
}

void check_deepseek_gguf(const ModelConfig& c, const std::string& arch, const std::string& where) {
  const bool mla = arch != "glm4moe";
  DSPARK_CHECK_KIND(unsupported, c.mla() == mla,
                    "{}: a GGUF `{}` file {} multi-head latent attention", where, arch,
                    mla ? "needs" : "has no");
  // llama.cpp rotates deepseek2's interleaved pairs and glm4moe's halves.
  DSPARK_CHECK_KIND(unsupported, c.rope_interleave == mla,
                    "{}: a GGUF `{}` file rotates {} pairs; the checkpoint rotates the other kind",
                    where, arch, mla ? "interleaved" : "half-split");
  DSPARK_CHECK_KIND(unsupported, (arch == "glm-dsa") == c.dsa() && (!c.dsa() || c.q_lora_rank > 0),
                    "{}: a GGUF `{}` file {} the DeepSeek sparse-attention indexer (from the q "
                    "LoRA)",
                    where, arch, arch == "glm-dsa" ? "needs" : "has no");
  DSPARK_CHECK_KIND(unsupported, c.moe_sigmoid_routing && c.num_experts > 0,
                    "{}: a GGUF `{}` file holds DeepSeek MoE routing (sigmoid scores with the "
                    "score correction)",
                    where, arch);
  // A deepseek2 file keeps YaRN's mscale_all_dim only (yarn_log_multiplier) and is read back with
  // mscale 1 (docs/gguf.md): an mscale of 0 beside a non-zero mscale_all_dim would come back as 1,
  // another attention factor.
  const RopeScaling& r = c.rope_scaling;
  const bool mscales = mla ? r.mscale == 1 || (r.mscale == 0 && r.mscale_all_dim == 0)
                           : (r.mscale == 0 || r.mscale == 1) && r.mscale_all_dim == 0;
  DSPARK_CHECK_KIND(unsupported,
                    r.type == "default" || r.type == "linear" ||
                        (r.type == "yarn" && mscales && r.attention_factor == 0 && r.truncate),
                    "{}: rope scaling '{}' (mscale {}, mscale_all_dim {}, attention_factor {}) "
                    "cannot be written to a GGUF `{}` file",
                    where, r.type, r.mscale, r.mscale_all_dim, r.attention_factor, arch);
  size_t dense = 0;
  while (dense < c.layer_moe.size() && !c.layer_moe[dense]) ++dense;
  for (size_t l = dense; l < c.layer_moe.size(); ++l) {
    DSPARK_CHECK_KIND(unsupported, c.layer_moe[l],
                      "{}: layer {} is dense after MoE layers; a GGUF `{}` file has only leading "
                      "dense layers",
                      where, l, arch);
  }
}

int deepseek_gguf_nextn(const ModelConfig& c, const std::string& arch, bool has_mtp_tensors) {
  return arch != "deepseek2" || has_mtp_tensors ? c.num_nextn_predict_layers : 0;
}

void add_deepseek_gguf_metadata(const ModelConfig& c, const std::string& arch, int nextn,
                                std::vector<std::pair<std::string, GgufValue>>& m) {
  const std::string p = arch + ".";
  if (nextn > 0) m.emplace_back(p + "nextn_predict_layers", gguf_u32(nextn));
  if (arch != "glm4moe") {  // MLA
    const int r = c.kv_lora_rank, rope = c.qk_rope_head_dim;
    m.emplace_back(p + "attention.head_count_kv", gguf_u32(1));
    if (c.q_lora_rank > 0) m.emplace_back(p + "attention.q_lora_rank", gguf_u32(c.q_lora_rank));
    m.emplace_back(p + "attention.kv_lora_rank", gguf_u32(r));
    m.emplace_back(p + "attention.key_length", gguf_u32(r + rope));
    m.emplace_back(p + "attention.value_length", gguf_u32(r));
    m.emplace_back(p + "attention.key_length_mla", gguf_u32(c.qk_nope_head_dim + rope));
    m.emplace_back(p + "attention.value_length_mla", gguf_u32(c.v_head_dim));
    m.emplace_back(p + "rope.dimension_count", gguf_u32(rope));
    if (c.rope_scaling.type == "yarn" && c.rope_scaling.mscale_all_dim != 0)
      m.emplace_back(p + "rope.scaling.yarn_log_multiplier",
                     gguf_f32(0.1 * c.rope_scaling.mscale_all_dim));
  } else {
    const auto rotary = static_cast<int64_t>(c.head_dim * c.partial_rotary_factor);
    m.emplace_back(p + "attention.head_count_kv", gguf_u32(c.num_kv_heads));
    m.emplace_back(p + "attention.key_length", gguf_u32(c.head_dim));
    m.emplace_back(p + "attention.value_length", gguf_u32(c.head_dim));
    m.emplace_back(p + "rope.dimension_count", gguf_u32(rotary));
  }
  int64_t dense = 0;
  while (dense < static_cast<int64_t>(c.layer_moe.size()) && !c.layer_moe[dense]) ++dense;
  m.emplace_back(p + "expert_count", gguf_u32(c.num_experts));
  m.emplace_back(p + "expert_used_count", gguf_u32(c.num_experts_per_tok));
  m.emplace_back(p + "expert_feed_forward_length", gguf_u32(c.moe_intermediate_size));
  m.emplace_back(p + "expert_shared_count", gguf_u32(c.n_shared_experts));
  m.emplace_back(p + "expert_group_count", gguf_u32(c.n_group));
  m.emplace_back(p + "expert_group_used_count", gguf_u32(c.topk_group));
  m.emplace_back(p + "expert_weights_scale", gguf_f32(c.routed_scaling_factor));
  if (c.norm_topk_prob) m.emplace_back(p + "expert_weights_norm", gguf_bool(true));
  m.emplace_back(p + "expert_gating_func", gguf_u32(2));  // sigmoid
  m.emplace_back(p + "leading_dense_block_count", gguf_u32(dense));
  if (arch == "glm-dsa") {
    m.emplace_back(p + "attention.indexer.head_count", gguf_u32(c.index_n_heads));
    m.emplace_back(p + "attention.indexer.key_length", gguf_u32(c.index_head_dim));
    m.emplace_back(p + "attention.indexer.top_k", gguf_u32(c.index_topk));
    std::vector<int64_t> full;  // per decoder layer: its own indexer ("full"), else shared
    for (bool shared : c.index_shared) full.push_back(shared ? 0 : 1);
    m.emplace_back(p + "attention.indexer.types",
                   GgufValue{GgufValue::Type::array, GgufValue::Type::boolean, std::move(full)});
  }
}

std::optional<std::string> deepseek_gguf_name(const std::string& arch, const std::string& hf) {
  constexpr std::string_view kLayers = "model.layers.";
  if (!hf.starts_with(kLayers)) return std::nullopt;
  const size_t dot = hf.find('.', kLayers.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string layer = hf.substr(kLayers.size(), dot - kLayers.size());
  const std::string key = hf.substr(dot + 1);
  if (key == "mlp.gate.e_score_correction_bias")
    return fmt::format("blk.{}.exp_probs_b.bias", layer);
  if (arch == "glm4moe" && key == "post_attention_layernorm.weight")
    return fmt::format("blk.{}.post_attention_norm.weight", layer);
  return std::nullopt;
}

}  // namespace dspark
