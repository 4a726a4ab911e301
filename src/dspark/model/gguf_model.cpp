// GGUF -> ModelConfig + WeightSource for our Llama family (see gguf_model.h, docs/gguf.md).
#include "dspark/model/gguf_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dspark/core/error.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {

// GGUF tensor names of one decoder layer ("blk.N.<key>") -> Hugging Face suffix.
struct LayerName {
  const char* gguf;
  const char* hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    // DeepSeek MoE (deepseek2, glm4moe): shared experts, the router's score correction.
    {"ffn_gate_shexp", "mlp.shared_experts.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_experts.up_proj"},
    {"ffn_down_shexp", "mlp.shared_experts.down_proj"},
    // MLA (deepseek2): q LoRA, the latent, and kv_b_proj split per head (k_b transposed).
    {"attn_q_a", "self_attn.q_a_proj"},
    {"attn_q_a_norm", "self_attn.q_a_layernorm"},
    {"attn_q_b", "self_attn.q_b_proj"},
    {"attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"},
    {"attn_kv_a_norm", "self_attn.kv_a_layernorm"},
    {"attn_kv_b", "self_attn.kv_b_proj"},
    {"attn_k_b", "self_attn.k_b_proj"},
    {"attn_v_b", "self_attn.v_b_proj"},
    // The DSA indexer (glm-dsa): its query and key projections, head weights and key LayerNorm.
    {"indexer.attn_q_b", "self_attn.indexer.wq_b"},
    {"indexer.attn_k", "self_attn.indexer.wk"},
    {"indexer.proj", "self_attn.indexer.weights_proj"},
    {"indexer.k_norm", "self_attn.indexer.k_norm"},
    // glm4moe's name for the norm before the MLP.
    {"post_attention_norm", "post_attention_layernorm"},
    // The next-token prediction (MTP) layer's own tensors (llama.cpp's "nextn", in the blocks
    // after the decoder's); the rest of such a block is named as any other.
    {"nextn.eh_proj", "eh_proj"},
    {"nextn.enorm", "enorm"},
    {"nextn.hnorm", "hnorm"},
    {"nextn.embed_tokens", "embed_tokens"},
    {"nextn.shared_head_norm", "shared_head.norm"},
    {"nextn.shared_head_head", "shared_head.head"},
};
// Stacked expert tensors "blk.N.<key>.weight" [experts, rows, cols] -> per-expert HF projections.
constexpr LayerName kExpertNames[] = {
    {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};

// The Hugging Face name of a GGUF tensor name; other names are kept as they are.
std::string hf_name_of(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return name;
  const std::string layer = name.substr(4, dot - 4);
  if (layer.empty() || !std::all_of(layer.begin(), layer.end(),
                                    [](unsigned char ch) { return std::isdigit(ch) != 0; }))
    return name;
  const size_t last = name.rfind('.');
  if (last <= dot) return name;
  const std::string key = name.substr(dot + 1, last - dot - 1);
  const std::string kind = name.substr(last + 1);  // weight / bias
  if (key == "exp_probs_b" && kind == "bias")
    return fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", layer);
  for (const LayerName& n : kLayerNames) {
    if (key == n.gguf) return fmt::format("model.layers.{}.{}.{}", layer, n.hf, kind);
  }
  return name;
}

}  // namespace

std::optional<std::string> gguf_name_of(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  constexpr std::string_view kLayers = "model.layers.";
  if (!hf_name.starts_with(kLayers)) return std::nullopt;
  const size_t dot = hf_name.find('.', kLayers.size());
  const size_t last = hf_name.rfind('.');
  if (dot == std::string::npos || last <= dot) return std::nullopt;
  const std::string layer = hf_name.substr(kLayers.size(), dot - kLayers.size());
  const std::string key = hf_name.substr(dot + 1, last - dot - 1);
  for (const LayerName& n : kLayerNames) {
    if (key == n.hf) return fmt::format("blk.{}.{}.{}", layer, n.gguf, hf_name.substr(last + 1));
  }
  return std::nullopt;
}

namespace {

// Moves the rows of each head between the Hugging Face order [half 0 | half 1] and llama.cpp's
// interleaved pairs: to_hf puts GGUF row 2i + s at HF row s * half + i, else the other way.
template <typename T>
void move_head_rows(std::vector<T>& w, int n_heads, int64_t rows, int64_t cols, bool to_hf) {
  DSPARK_CHECK_KIND(io, n_heads > 0 && rows % (2 * n_heads) == 0,
                    "q/k projection with {} rows cannot be split into {} heads of even size", rows,
                    n_heads);
  const int64_t head_dim = rows / n_heads, half = head_dim / 2;
  std::vector<T> head(static_cast<size_t>(head_dim * cols));
  for (int64_t h = 0; h < n_heads; ++h) {
    T* base = w.data() + h * head_dim * cols;
    std::copy(base, base + head_dim * cols, head.begin());
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t gguf_row = 2 * i + s, hf_row = s * half + i;
        const T* src = head.data() + (to_hf ? gguf_row : hf_row) * cols;
        std::copy(src, src + cols, base + (to_hf ? hf_row : gguf_row) * cols);
      }
    }
  }
}

bool has_magic(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

DType torch_dtype_of(const GgufFile& file) {
  switch (file.find_int("general.file_type").value_or(0)) {
    case 1:
      return DType::f16;
    case 32:
      return DType::bf16;
    default:
      return DType::f32;  // f32, or quantized (dequantized to f32 at load)
  }
}

}  // namespace

std::optional<std::filesystem::path> resolve_gguf_model(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    if (is_gguf_path(path) || has_magic(path)) return path;
    return std::nullopt;
  }
  if (!std::filesystem::is_directory(path, ec) ||
      std::filesystem::exists(path / "config.json", ec)) {
    return std::nullopt;
  }
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    if (entry.is_regular_file(ec) && is_gguf_path(entry.path())) found.push_back(entry.path());
  }
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  if (found.size() > 1) {
    std::vector<std::string> names;
    for (const auto& f : found) names.push_back(f.filename().string());
    DSPARK_FAIL(io, "{} holds {} GGUF files ({}); pass the one to load", path.string(),
                found.size(), fmt::join(names, ", "));
  }
  return found.front();
}

std::vector<int> gguf_eos_token_ids(const GgufFile& file) {
  std::vector<int> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (const auto id = file.find_int(key)) {
      if (std::find(ids.begin(), ids.end(), static_cast<int>(*id)) == ids.end())
        ids.push_back(static_cast<int>(*id));
    }
  }
  return ids;
}

namespace {

// `p` + `key`: a required integer, positive and below 2^31.
int positive_key(const GgufFile& file, const std::string& p, const std::string& key,
                 const std::string& where) {
  const int64_t v = file.get_int(p + key);
  DSPARK_CHECK_KIND(io, v > 0 && v < (int64_t{1} << 31), "{}: {}{} = {} must be positive", where, p,
                    key, v);
  return static_cast<int>(v);
}

// DeepSeek MoE from deepseek2 / glm4moe / glm-dsa metadata (as llama.cpp's converter writes it):
// sigmoid routing with the score correction (expert_gating_func 2), groups, shared experts, the
// leading dense layers. `default_gating`: what llama.cpp takes when the key is absent.
void gguf_deepseek_moe(const GgufFile& file, const std::string& p, const std::string& where,
                       int64_t default_gating, ModelConfig& c) {
  auto positive = [&](const std::string& key, int64_t fallback) {
    const int64_t v = file.find_int(p + key).value_or(fallback);
    DSPARK_CHECK_KIND(io, v > 0 && v < (int64_t{1} << 31), "{}: {}{} = {} must be positive", where,
                      p, key, v);
    return static_cast<int>(v);
  };
  const int64_t gating = file.find_int(p + "expert_gating_func").value_or(default_gating);
  DSPARK_CHECK_KIND(unsupported, gating == 2,
                    "{}: {}expert_gating_func {} is not supported (DeepSeek MoE needs 2, sigmoid "
                    "scores with the score correction; 1 is DeepSeek-V2's softmax routing)",
                    where, p, gating);
  c.moe_sigmoid_routing = true;
  c.num_experts = positive("expert_count", 0);
  c.num_experts_per_tok = positive("expert_used_count", 0);
  c.moe_intermediate_size = positive("expert_feed_forward_length", 0);
  const int64_t shared = file.find_int(p + "expert_shared_count").value_or(0);
  DSPARK_CHECK_KIND(io, shared >= 0 && shared < 1024, "{}: {}expert_shared_count = {}", where, p,
                    shared);
  c.n_shared_experts = static_cast<int>(shared);
  c.n_group = positive("expert_group_count", 1);
  c.topk_group = positive("expert_group_used_count", 1);
  c.norm_topk_prob = file.find_bool(p + "expert_weights_norm").value_or(false);
  c.routed_scaling_factor = file.find_double(p + "expert_weights_scale").value_or(1.0);
  DSPARK_CHECK_KIND(io, c.routed_scaling_factor > 0 && std::isfinite(c.routed_scaling_factor),
                    "{}: {}expert_weights_scale must be positive, got {}", where, p,
                    c.routed_scaling_factor);
  DSPARK_CHECK_KIND(io, c.num_experts % c.n_group == 0 && c.num_experts / c.n_group >= 2,
                    "{}: expert_count ({}) must be a multiple of expert_group_count ({}) with at "
                    "least 2 experts per group",
                    where, c.num_experts, c.n_group);
  DSPARK_CHECK_KIND(io,
                    c.topk_group <= c.n_group &&
                        c.num_experts_per_tok <= c.topk_group * (c.num_experts / c.n_group),
                    "{}: expert_used_count {} does not fit expert_group_used_count {} of {} groups",
                    where, c.num_experts_per_tok, c.topk_group, c.n_group);
  const int64_t dense = file.find_int(p + "leading_dense_block_count").value_or(0);
  c.layer_moe.assign(static_cast<size_t>(c.num_layers), false);
  for (int l = 0; l < c.num_layers; ++l) {
    c.layer_moe[static_cast<size_t>(l)] = l >= dense;
    DSPARK_CHECK_KIND(io,
                      !(l >= dense) || file.contains(fmt::format("blk.{}.ffn_gate_inp.weight", l)),
                      "{}: layer {} has no router (blk.{}.ffn_gate_inp.weight) although "
                      "leading_dense_block_count is {}",
                      where, l, l, dense);
  }
}

// MLA dimensions from deepseek2 metadata. llama.cpp writes key_length / value_length of the
// absorbed form (kv_lora_rank + rope, kv_lora_rank) and the per-head sizes as *_mla; older files
// have only key_length = nope + rope and value_length = v.
void gguf_mla(const GgufFile& file, const std::string& p, const std::string& where,
              ModelConfig& c) {
  auto positive = [&](const std::string& key) { return positive_key(file, p, key, where); };
  c.num_kv_heads = c.num_heads;  // transformers' config; MLA itself has one latent per token
  c.kv_lora_rank = positive("attention.kv_lora_rank");
  c.q_lora_rank = file.has(p + "attention.q_lora_rank") ? positive("attention.q_lora_rank") : 0;
  c.qk_rope_head_dim = positive("rope.dimension_count");
  const bool mla_keys = file.has(p + "attention.key_length_mla");
  const int qk = positive(mla_keys ? "attention.key_length_mla" : "attention.key_length");
  c.v_head_dim = positive(mla_keys ? "attention.value_length_mla" : "attention.value_length");
  DSPARK_CHECK_KIND(io, qk > c.qk_rope_head_dim && c.qk_rope_head_dim % 2 == 0,
                    "{}: a q/k head of {} with a rotated part of {}", where, qk,
                    c.qk_rope_head_dim);
  c.qk_nope_head_dim = qk - c.qk_rope_head_dim;
  c.head_dim = c.qk_rope_head_dim;  // the rotary dimension, as parse_deepseek sets it
  c.rope_interleave = true;         // llama.cpp rotates deepseek2's pairs (2i, 2i + 1)
}

// GLM-5's DSA indexer from glm-dsa metadata: attention.indexer.{top_k,head_count,key_length}, and
// which decoder layers have an indexer of their own: attention.indexer.types (one bool or integer
// per layer, true / nonzero "full", or one value for every layer), else the layers that hold
// blk.N.indexer.* tensors (GLM-5 / 5.1 files have no key and an indexer in every layer; the
// shared layers of GLM-5.2 have no indexer tensors). Every full layer must hold them.
void gguf_dsa(const GgufFile& file, const std::string& p, const std::string& where,
              ModelConfig& c) {
  auto positive = [&](const std::string& key) { return positive_key(file, p, key, where); };
  DSPARK_CHECK_KIND(unsupported, c.q_lora_rank > 0,
                    "{}: glm-dsa needs {}attention.q_lora_rank (the indexer's queries come from "
                    "the q LoRA)",
                    where, p);
  c.index_topk = positive("attention.indexer.top_k");
  c.index_n_heads = positive("attention.indexer.head_count");
  c.index_head_dim = positive("attention.indexer.key_length");
  DSPARK_CHECK_KIND(io, c.index_head_dim >= c.qk_rope_head_dim,
                    "{}: {}attention.indexer.key_length ({}) is smaller than rope.dimension_count "
                    "({})",
                    where, p, c.index_head_dim, c.qk_rope_head_dim);
  const auto layers = static_cast<size_t>(c.num_layers);
  auto has_indexer = [&](size_t l) {
    return file.contains(fmt::format("blk.{}.indexer.attn_k.weight", l));
  };
  const std::string key = p + "attention.indexer.types";
  std::vector<bool> full(layers);
  if (const GgufValue* types = file.find(key)) {
    std::vector<int64_t> flags;
    if (types->is_array()) {
      flags = types->as_ints(key);
    } else {
      flags.assign(layers, types->type == GgufValue::Type::boolean ? types->as_bool(key)
                                                                   : types->as_int(key) != 0);
    }
    DSPARK_CHECK_KIND(io, flags.size() == layers,
                      "{}: {} has {} entries for {} decoder layers (block_count less "
                      "nextn_predict_layers)",
                      where, key, flags.size(), layers);
    for (size_t l = 0; l < layers; ++l) full[l] = flags[l] != 0;
  } else {
    for (size_t l = 0; l < layers; ++l) full[l] = has_indexer(l);
  }
  DSPARK_CHECK_KIND(io, full[0],
                    "{}: layer 0 has no indexer of its own ({}) but no layer before it selects "
                    "keys",
                    where, file.has(key) ? key + "[0] is false" : "no blk.0.indexer.attn_k.weight");
  c.index_shared.assign(layers, false);
  for (size_t l = 0; l < layers; ++l) {
    c.index_shared[l] = !full[l];
    DSPARK_CHECK_KIND(io, !full[l] || has_indexer(l),
                      "{}: layer {} is a full indexer layer ({}[{}]) but the file has no "
                      "blk.{}.indexer.attn_k.weight",
                      where, l, key, l, l);
  }
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& file) {
  const std::string where = file.path().string();
  const std::string arch = file.get_string("general.architecture");
  const bool glm_dsa = arch == "glm-dsa";
  const bool deepseek2 = arch == "deepseek2" || glm_dsa;  // glm-dsa: deepseek2's MLA + indexer
  const bool glm4moe = arch == "glm4moe";
  DSPARK_CHECK_KIND(unsupported,
                    arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe" ||
                        deepseek2 || glm4moe,
                    "{}: GGUF architecture '{}' is not supported (supported: llama, qwen2, qwen3, "
                    "qwen3moe, deepseek2, glm4moe, glm-dsa)",
                    where, arch);
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key) { return positive_key(file, p, key, where); };

  ModelConfig c;
  // block_count counts the next-token prediction layers that follow the decoder's (glm4moe,
  // glm-dsa; their tensors are blk.{num_layers + i}.nextn.* with the block's attention and FFN,
  // model/mtp.h).
  const int blocks = positive("block_count");
  const int64_t nextn = file.find_int(p + "nextn_predict_layers").value_or(0);
  DSPARK_CHECK_KIND(io, nextn >= 0 && nextn < blocks,
                    "{}: {}nextn_predict_layers = {} with block_count {}", where, p, nextn, blocks);
  c.num_layers = blocks - static_cast<int>(nextn);
  c.num_nextn_predict_layers = static_cast<int>(nextn);
  c.checkpoint_path = file.path();
  c.hidden_size = positive("embedding_length");
  if (deepseek2 || glm4moe) {
    c.architecture = glm_dsa     ? "GlmMoeDsaForCausalLM"
                     : deepseek2 ? "DeepseekV3ForCausalLM"
                                 : "Glm4MoeForCausalLM";
    c.model_type = glm_dsa ? "glm_moe_dsa" : deepseek2 ? "deepseek_v3" : "glm4_moe";
    c.intermediate_size = positive("feed_forward_length");
    c.qk_norm = glm4moe && file.contains("blk.0.attn_q_norm.weight");
    // Without the key llama.cpp routes deepseek2 files by softmax (DeepSeek-V2's routing) and
    // glm-dsa files by sigmoid.
    gguf_deepseek_moe(file, p, where, glm_dsa ? 2 : 1, c);
  } else if (arch != "qwen3moe") {
    DSPARK_CHECK_KIND(unsupported, file.find_int(p + "expert_count").value_or(0) == 0,
                      "{}: {} GGUF models with experts ({}expert_count) are not supported", where,
                      arch, p);
    // Qwen2 / Qwen3 keep q/k rows as the checkpoint has them (llama.cpp permutes Llama's only);
    // Qwen2's q/k/v biases are found below, Qwen3's per-head q/k norms here.
    c.architecture = arch == "llama"   ? "LlamaForCausalLM"
                     : arch == "qwen2" ? "Qwen2ForCausalLM"
                                       : "Qwen3ForCausalLM";
    c.model_type = arch;
    c.qk_norm = arch == "qwen3";
    c.intermediate_size = positive("feed_forward_length");
  } else {
    c.architecture = "Qwen3MoeForCausalLM";
    c.model_type = "qwen3_moe";
    c.qk_norm = true;
    c.num_experts = positive("expert_count");
    c.num_experts_per_tok = positive("expert_used_count");
    DSPARK_CHECK_KIND(io, c.num_experts_per_tok <= c.num_experts,
                      "{}: {}expert_used_count {} exceeds expert_count {}", where, p,
                      c.num_experts_per_tok, c.num_experts);
    c.moe_intermediate_size = positive("expert_feed_forward_length");
    c.norm_topk_prob = file.find_bool(p + "expert_weights_norm").value_or(true);
    c.layer_moe.resize(static_cast<size_t>(c.num_layers));
    for (int l = 0; l < c.num_layers; ++l)
      c.layer_moe[static_cast<size_t>(l)] =
          file.contains(fmt::format("blk.{}.ffn_gate_inp.weight", l));
    // The dense layers' MLP width (only needed when a layer has no experts).
    c.intermediate_size = file.has(p + "feed_forward_length") ? positive("feed_forward_length")
                                                              : c.moe_intermediate_size;
  }
  c.num_heads = positive("attention.head_count");
  if (deepseek2) {
    gguf_mla(file, p, where, c);
    if (glm_dsa) gguf_dsa(file, p, where, c);
  } else {
    c.num_kv_heads =
        file.has(p + "attention.head_count_kv") ? positive("attention.head_count_kv") : c.num_heads;
    c.head_dim = file.has(p + "attention.key_length") ? positive("attention.key_length")
                                                      : c.hidden_size / c.num_heads;
    if (file.has(p + "attention.value_length")) {
      DSPARK_CHECK_KIND(unsupported, positive("attention.value_length") == c.head_dim,
                        "{}: attention.value_length differs from key_length", where);
    }
    DSPARK_CHECK_KIND(io, file.has(p + "attention.key_length") || c.hidden_size % c.num_heads == 0,
                      "{}: embedding_length {} is not a multiple of head_count {}", where,
                      c.hidden_size, c.num_heads);
  }
  c.rms_norm_eps = file.get(p + "attention.layer_norm_rms_epsilon")
                       .as_double(p + "attention.layer_norm_rms_epsilon");
  c.rope_theta = file.find_double(p + "rope.freq_base").value_or(10000.0);
  if (!deepseek2 && file.has(p + "rope.dimension_count")) {
    c.partial_rotary_factor =
        static_cast<double>(positive("rope.dimension_count")) / static_cast<double>(c.head_dim);
  }
  c.max_position_embeddings =
      file.has(p + "context_length") ? positive("context_length") : c.max_position_embeddings;

  // Rope scaling: `rope.scaling.type` (none / linear / yarn), or the older `rope.scale_linear`.
  const std::string scaling = file.find_string(p + "rope.scaling.type")
                                  .value_or(file.has(p + "rope.scale_linear") ? "linear" : "none");
  const double factor = file.find_double(p + "rope.scaling.factor")
                            .value_or(file.find_double(p + "rope.scale_linear").value_or(1.0));
  if (scaling == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = factor;
  } else if (scaling == "yarn") {
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = factor;
    c.rope_scaling.original_max_position_embeddings =
        file.find_double(p + "rope.scaling.original_context_length")
            .value_or(static_cast<double>(c.max_position_embeddings));
    c.rope_scaling.beta_fast = file.find_double(p + "rope.scaling.yarn_beta_fast").value_or(32.0);
    c.rope_scaling.beta_slow = file.find_double(p + "rope.scaling.yarn_beta_slow").value_or(1.0);
    if (deepseek2) {
      // llama.cpp keeps 0.1 * mscale_all_dim; mscale is 1 in DeepSeek's published configs.
      if (const auto mul = file.find_double(p + "rope.scaling.yarn_log_multiplier")) {
        c.rope_scaling.mscale = 1.0;
        c.rope_scaling.mscale_all_dim = *mul / 0.1;
      }
    }
  } else {
    DSPARK_CHECK_KIND(unsupported, scaling == "none",
                      "{}: rope scaling type '{}' is not supported (none, linear, yarn)", where,
                      scaling);
  }

  // Vocabulary size: the token list, else `<arch>.vocab_size`, else the embedding rows.
  if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int>(tokens->as_strings("tokenizer.ggml.tokens").size());
  } else if (file.has(p + "vocab_size")) {
    c.vocab_size = positive("vocab_size");
  } else {
    c.vocab_size = static_cast<int>(file.tensor("token_embd.weight").shape[0]);
  }
  c.tie_word_embeddings = !file.contains("output.weight");
  c.attention_bias = file.contains("blk.0.attn_q.bias");
  c.torch_dtype = torch_dtype_of(file);
  c.bos_token_id = static_cast<int>(file.find_int("tokenizer.ggml.bos_token_id").value_or(-1));
  c.eos_token_ids = gguf_eos_token_ids(file);
  c.pad_token_id = static_cast<int>(file.find_int("tokenizer.ggml.padding_token_id").value_or(-1));
  return c;
}

namespace {

bool is_qk_projection(const std::string& hf_name, bool& is_q) {
  is_q = hf_name.find(".self_attn.q_proj.") != std::string::npos;
  return is_q || hf_name.find(".self_attn.k_proj.") != std::string::npos;
}

}  // namespace

void unpermute_gguf_qk_rows(std::vector<float>& w, int n_heads, int64_t rows, int64_t cols) {
  move_head_rows(w, n_heads, rows, cols, true);
}

void permute_gguf_qk_rows(std::vector<float>& w, int n_heads, int64_t rows, int64_t cols) {
  move_head_rows(w, n_heads, rows, cols, false);
}

void unpermute_gguf_qk_block_rows(std::vector<uint8_t>& w, int n_heads, int64_t rows,
                                  int64_t row_bytes) {
  move_head_rows(w, n_heads, rows, row_bytes, true);
}

GgufWeights::GgufWeights(const GgufFile& file, const ModelConfig& config)
    : file_(file),
      permuted_qk_(config.architecture == "LlamaForCausalLM"),
      num_heads_(config.num_heads),
      num_kv_heads_(config.num_kv_heads) {
  for (const GgufTensorInfo& t : file.tensors()) {
    hf_to_gguf_[hf_name_of(t.name)] = t.name;
    for (const LayerName& n : kExpertNames) {
      const std::string suffix = fmt::format(".{}.weight", n.gguf);
      if (!t.name.starts_with("blk.") || !t.name.ends_with(suffix)) continue;
      const std::string layer = t.name.substr(4, t.name.size() - 4 - suffix.size());
      DSPARK_CHECK_KIND(io, t.shape.size() == 3,
                        "{}: expert tensor '{}' has shape {}; expected [experts, rows, cols]",
                        origin(), t.name, t.shape.str());
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        experts_[fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, e, n.hf)] =
            ExpertSlice{t.name, e};
      }
    }
  }
}

const GgufWeights::ExpertSlice* GgufWeights::expert_slice(const std::string& hf_name) const {
  const auto it = experts_.find(hf_name);
  return it == experts_.end() ? nullptr : &it->second;
}

bool GgufWeights::contains(const std::string& name) const {
  return hf_to_gguf_.count(name) != 0 || experts_.count(name) != 0;
}

Shape GgufWeights::shape_of(const std::string& name) const {
  if (const ExpertSlice* slice = expert_slice(name)) {
    const Shape& s = file_.tensor(slice->gguf).shape;
    return Shape{s[1], s[2]};
  }
  return WeightSource::shape_of(name);
}

const std::vector<float>& GgufWeights::dequantized(const std::string& gguf) const {
  std::lock_guard lock(mutex_);
  auto cached = cache_.find(gguf);
  if (cached == cache_.end()) cached = cache_.emplace(gguf, file_.dequantize(gguf)).first;
  return cached->second;
}

int64_t GgufWeights::stored_bytes(const std::string& name) const {
  const std::string gguf = gguf_name(name);
  if (gguf.empty()) return 0;
  const GgufTensorInfo& info = file_.tensor(gguf);
  const int64_t bytes = static_cast<int64_t>(info.bytes);
  return expert_slice(name) != nullptr ? bytes / std::max<int64_t>(1, info.shape[0]) : bytes;
}

int64_t GgufWeights::total_stored_bytes() const {
  return static_cast<int64_t>(file_.tensor_bytes());
}

std::string GgufWeights::gguf_name(const std::string& hf_name) const {
  if (const ExpertSlice* slice = expert_slice(hf_name)) return slice->gguf;
  const auto it = hf_to_gguf_.find(hf_name);
  return it == hf_to_gguf_.end() ? std::string() : it->second;
}

Tensor GgufWeights::get(const std::string& name) const {
  if (const ExpertSlice* slice = expert_slice(name)) {
    const Shape& s = file_.tensor(slice->gguf).shape;
    const std::vector<float>& all = dequantized(slice->gguf);
    return Tensor(const_cast<float*>(all.data()) + slice->expert * s[1] * s[2], DType::f32,
                  Shape{s[1], s[2]}, Device::cpu());
  }
  const auto it = hf_to_gguf_.find(name);
  DSPARK_CHECK_KIND(io, it != hf_to_gguf_.end(), "tensor '{}' not found in {}", name, origin());
  const GgufTensorInfo& info = file_.tensor(it->second);
  std::lock_guard lock(mutex_);
  auto cached = cache_.find(name);
  if (cached == cache_.end()) {
    std::vector<float> values = file_.dequantize(it->second);
    bool is_q = false;
    if (permuted_qk_ && is_qk_projection(name, is_q)) {
      const int64_t rows = info.shape[0];
      const int64_t cols = info.shape.size() > 1 ? info.numel / rows : 1;
      unpermute_gguf_qk_rows(values, is_q ? num_heads_ : num_kv_heads_, rows, cols);
    }
    cached = cache_.emplace(name, std::move(values)).first;
  }
  return Tensor(cached->second.data(), DType::f32, info.shape, Device::cpu());
}

std::optional<QuantizedView> GgufWeights::get_quantized(const std::string& name) const {
  if (const ExpertSlice* slice = expert_slice(name)) {
    const GgufTensorInfo& info = file_.tensor(slice->gguf);
    const std::optional<QuantType> quant = quant_type_of(info.type);
    if (!quant) return std::nullopt;
    QuantizedView v;
    v.quant = *quant;
    v.n = info.shape[1];
    v.k = info.shape[2];
    const int64_t row_bytes = quant_row_bytes(*quant, v.k);
    DSPARK_CHECK_KIND(io, static_cast<int64_t>(info.bytes) == info.shape[0] * v.n * row_bytes,
                      "{}: tensor '{}' holds {} bytes, not {} experts of {} rows of {}", origin(),
                      slice->gguf, info.bytes, info.shape[0], v.n, row_bytes);
    const uint8_t* data = file_.data(info) + slice->expert * v.n * row_bytes;
    v.blocks = Tensor(const_cast<uint8_t*>(data), DType::u8, Shape{v.n, row_bytes}, Device::cpu());
    return v;
  }
  const auto it = hf_to_gguf_.find(name);
  if (it == hf_to_gguf_.end()) return std::nullopt;
  const GgufTensorInfo& info = file_.tensor(it->second);
  const std::optional<QuantType> quant = quant_type_of(info.type);
  if (!quant || info.shape.size() != 2) return std::nullopt;
  QuantizedView v;
  v.quant = *quant;
  v.n = info.shape[0];
  v.k = info.shape[1];
  const int64_t row_bytes = quant_row_bytes(*quant, v.k);
  DSPARK_CHECK_KIND(io, static_cast<int64_t>(info.bytes) == v.n * row_bytes,
                    "{}: tensor '{}' holds {} bytes, not {} rows of {}", origin(), it->second,
                    info.bytes, v.n, row_bytes);
  const uint8_t* data = file_.data(info);
  bool is_q = false;
  if (permuted_qk_ && is_qk_projection(name, is_q)) {
    std::lock_guard lock(mutex_);
    auto cached = block_cache_.find(name);
    if (cached == block_cache_.end()) {
      std::vector<uint8_t> rows(data, data + info.bytes);
      unpermute_gguf_qk_block_rows(rows, is_q ? num_heads_ : num_kv_heads_, v.n, row_bytes);
      cached = block_cache_.emplace(name, std::move(rows)).first;
    }
    data = cached->second.data();
  }
  v.blocks = Tensor(const_cast<uint8_t*>(data), DType::u8, Shape{v.n, row_bytes}, Device::cpu());
  return v;
}

std::unique_ptr<Model> load_gguf_model(const GgufFile& file, Device device, DType dtype) {
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  return create_model(config, weights, device, dtype);
}

}  // namespace dspark
