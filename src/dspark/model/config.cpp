// Hugging Face config.json -> ModelConfig. A key absent from config.json takes the value that the
// transformers config class of the architecture gives it (e.g. Qwen3 head_dim 128, Mistral
// sliding_window 4096), so that dspark and transformers build the same model from the same file.
#include "dspark/model/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/io/json_util.h"

namespace dspark {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

enum class WindowRule {
  none,             // Llama: full attention everywhere
  mistral,          // every layer when `sliding_window` is set
  qwen,             // `layer_types`, else layers >= max_window_layers when use_sliding_window
  every_when_used,  // Qwen3-MoE: every layer when use_sliding_window
};

struct ArchInfo {
  std::string_view architecture;
  std::string_view model_type;
  int default_num_kv_heads;  // -1: num_heads
  int default_head_dim;      // -1: hidden_size / num_heads
  int default_max_position_embeddings;
  int default_bos_token_id;  // -1: none
  int default_eos_token_id;  // -1: none
  bool qkv_bias_always;      // Qwen2: q/k/v biases whatever attention_bias says
  bool qk_norm;
  WindowRule window_rule;
  bool moe;       // Qwen3-MoE: routed experts (parse_moe)
  bool deepseek;  // DeepSeek-V3: MLA and DeepSeek MoE (parse_deepseek)
  bool glm_moe;   // GLM-4.5: GQA with partial rotary and DeepSeek MoE (parse_glm4_moe)
  bool dsa;       // GLM-5: DeepSeek-V3's layout plus the DSA indexer (parse_glm_moe_dsa)
};

// Defaults as in transformers' LlamaConfig / Qwen2Config / Qwen3Config / MistralConfig /
// Qwen3MoeConfig / DeepseekV3Config / Glm4MoeConfig / GlmMoeDsaConfig.
constexpr std::array<ArchInfo, 8> kArchitectures = {{
    {"LlamaForCausalLM", "llama", -1, -1, 2048, 1, 2, false, false, WindowRule::none, false, false,
     false, false},
    {"MistralForCausalLM", "mistral", 8, -1, 131072, 1, 2, false, false, WindowRule::mistral, false,
     false, false, false},
    {"Qwen2ForCausalLM", "qwen2", 32, -1, 32768, -1, -1, true, false, WindowRule::qwen, false,
     false, false, false},
    {"Qwen3ForCausalLM", "qwen3", 32, 128, 32768, -1, -1, false, true, WindowRule::qwen, false,
     false, false, false},
    {"Qwen3MoeForCausalLM", "qwen3_moe", 4, -1, 32768, -1, -1, false, true,
     WindowRule::every_when_used, true, false, false, false},
    {"DeepseekV3ForCausalLM", "deepseek_v3", 128, -1, 4096, 0, 1, false, false, WindowRule::none,
     false, true, false, false},
    {"Glm4MoeForCausalLM", "glm4_moe", 8, -1, 131072, -1, -1, false, false, WindowRule::none, false,
     false, true, false},
    {"GlmMoeDsaForCausalLM", "glm_moe_dsa", 64, -1, 202752, 0, 1, false, false, WindowRule::none,
     false, true, false, true},
}};
// Qwen3MoeConfig's defaults for the expert keys.
constexpr int kDefaultNumExperts = 128;
constexpr int kDefaultExpertsPerToken = 8;
constexpr int kDefaultMoeIntermediate = 768;
constexpr int kDefaultMoeDenseIntermediate = 6144;  // intermediate_size (mlp_only_layers' MLP)
// DeepseekV3Config's defaults for the MLA and DeepSeek MoE keys.
constexpr int kDeepseekIntermediate = 18432;
constexpr int kDeepseekQLoraRank = 1536;
constexpr int kDeepseekKvLoraRank = 512;
constexpr int kDeepseekQkNopeHeadDim = 128;
constexpr int kDeepseekQkRopeHeadDim = 64;
constexpr int kDeepseekVHeadDim = 128;
constexpr int kDeepseekRoutedExperts = 256;
constexpr int kDeepseekSharedExperts = 1;
constexpr int kDeepseekMoeIntermediate = 2048;
constexpr int kDeepseekNGroup = 8;
constexpr int kDeepseekTopkGroup = 4;
constexpr double kDeepseekRoutedScaling = 2.5;
constexpr int kDeepseekFirstDense = 3;
// The MLA defaults of DeepseekV3Config and GlmMoeDsaConfig.
struct MlaDefaults {
  int q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
};
constexpr MlaDefaults kDeepseekMla{kDeepseekQLoraRank, kDeepseekKvLoraRank, kDeepseekQkNopeHeadDim,
                                   kDeepseekQkRopeHeadDim, kDeepseekVHeadDim};
constexpr MlaDefaults kGlmMoeDsaMla{2048, 512, 192, 64, 256};
// The defaults of the DeepSeek MoE keys: DeepseekV3Config's and Glm4MoeConfig's.
struct DeepseekMoeDefaults {
  int routed_experts, experts_per_token, moe_intermediate, shared_experts, n_group, topk_group,
      first_dense;
  double routed_scaling;
};
constexpr DeepseekMoeDefaults kDeepseekMoe{kDeepseekRoutedExperts,   8,
                                           kDeepseekMoeIntermediate, kDeepseekSharedExperts,
                                           kDeepseekNGroup,          kDeepseekTopkGroup,
                                           kDeepseekFirstDense,      kDeepseekRoutedScaling};
constexpr DeepseekMoeDefaults kGlm4Moe{128, 8, 1408, 1, 1, 1, 1, 1.0};
constexpr DeepseekMoeDefaults kGlmMoeDsaMoe{256, 8, 2048, 1, 1, 1, 3, 2.5};
constexpr int kGlmMoeDsaIntermediate = 12288;
constexpr double kGlmMoeDsaRmsNormEps = 1e-5;
// GlmMoeDsaConfig's indexer defaults.
constexpr int kGlmMoeDsaIndexTopk = 2048;
constexpr int kGlmMoeDsaIndexHeadDim = 128;
constexpr int kGlmMoeDsaIndexHeads = 32;
constexpr int kGlm4MoeIntermediate = 10944;
constexpr double kGlm4MoeRmsNormEps = 1e-5;
constexpr double kGlm4MoePartialRotary = 0.5;
constexpr int kDefaultSlidingWindow = 4096;  // Mistral/Qwen2/Qwen3 config default
constexpr int kDefaultMaxWindowLayers = 28;  // Qwen2/Qwen3 config default

const ArchInfo& find_architecture(const std::string& name, std::string_view source) {
  for (const ArchInfo& a : kArchitectures)
    if (a.architecture == name) return a;
  std::string supported;
  for (const ArchInfo& a : kArchitectures) {
    if (!supported.empty()) supported += ", ";
    supported += a.architecture;
  }
  DSPARK_FAIL(unsupported, "{}: unknown architecture '{}' (supported: {})", source, name,
              supported);
}

int positive_int(const json& j, std::string_view key, std::string_view source,
                 std::optional<int64_t> fallback = std::nullopt) {
  std::optional<int64_t> v = json_optional_int(j, key, source);
  if (!v) v = fallback;
  DSPARK_CHECK_KIND(io, v.has_value(), "{}: missing required key '{}'", source, key);
  DSPARK_CHECK_KIND(io, *v > 0 && *v <= (int64_t{1} << 30), "{}: key '{}' must be positive, got {}",
                    source, key, *v);
  return static_cast<int>(*v);
}

// A token id (int or null); `fallback` when absent.
int token_id(const json& j, std::string_view key, std::string_view source, int fallback) {
  if (!j.contains(key)) return fallback;
  const std::optional<int64_t> v = json_optional_int(j, key, source);
  return v ? static_cast<int>(*v) : -1;
}

// `eos_token_id`: an int, a list of ints, or null.
std::vector<int> token_id_list(const json& j, std::string_view key, std::string_view source,
                               int fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback >= 0 ? std::vector<int>{fallback} : std::vector<int>{};
  if (it->is_null()) return {};
  if (!it->is_array()) return {static_cast<int>(*json_optional_int(j, key, source))};
  std::vector<int> ids;
  for (const json& v : *it) {
    DSPARK_CHECK_KIND(io, v.is_number_integer(),
                      "{}: key '{}' must be an int or a list of ints, "
                      "got {}",
                      source, key, json_brief(*it));
    ids.push_back(v.get<int>());
  }
  return ids;
}

DType parse_torch_dtype(const json& j, std::string_view source) {
  // transformers >= 4.56 writes `dtype`; older versions `torch_dtype`. `dtype` wins when both are.
  std::string_view key = "dtype";
  std::optional<std::string> name = json_optional_string(j, key, source);
  if (!name) {
    key = "torch_dtype";
    name = json_optional_string(j, key, source);
  }
  if (!name) return DType::bf16;
  std::string_view n = *name;
  if (n.starts_with("torch.")) n.remove_prefix(6);
  if (n == "float32") return DType::f32;
  if (n == "bfloat16") return DType::bf16;
  if (n == "float16") return DType::f16;
  DSPARK_FAIL(unsupported, "{}: {} '{}' is not supported (float32, bfloat16, float16)", source, key,
              *name);
}

// The rope block: `rope_scaling` (older transformers) or `rope_parameters` (newer; rope_theta and
// partial_rotary_factor nested inside). As in transformers, a non-empty rope_scaling wins.
const json* rope_block(const json& j, std::string_view source) {
  for (std::string_view key : {"rope_scaling", "rope_parameters"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null() || (it->is_object() && it->empty())) continue;
    DSPARK_CHECK_KIND(io, it->is_object(), "{}: key '{}' must be an object, got {}", source, key,
                      json_brief(*it));
    // Per-layer-type nesting ({"full_attention": {...}, "sliding_attention": {...}}).
    const json* block = &*it;
    const json* first_nested = nullptr;
    for (const auto& [k, v] : it->items()) {
      if (k != "full_attention" && k != "sliding_attention") continue;
      DSPARK_CHECK_KIND(unsupported, first_nested == nullptr || *first_nested == v,
                        "{}: different rope parameters per layer type are not supported", source);
      first_nested = &v;
    }
    if (first_nested != nullptr) {
      DSPARK_CHECK_KIND(io, first_nested->is_object(), "{}: nested '{}' must be objects", source,
                        key);
      block = first_nested;
    }
    return block;
  }
  return nullptr;
}

void parse_rope(const json& j, std::string_view source, ModelConfig& c,
                double default_partial_rotary) {
  const json* rope = rope_block(j, source);
  const json empty = json::object();
  const json& r = rope != nullptr ? *rope : empty;
  const std::string rope_source = fmt::format("{} (rope parameters)", source);

  c.rope_theta = json_optional_number(r, "rope_theta", rope_source)
                     .value_or(json_optional_number(j, "rope_theta", source).value_or(10000.0));
  c.partial_rotary_factor = json_optional_number(r, "partial_rotary_factor", rope_source)
                                .value_or(json_optional_number(j, "partial_rotary_factor", source)
                                              .value_or(default_partial_rotary));
  DSPARK_CHECK_KIND(io, c.rope_theta > 0, "{}: rope_theta must be positive, got {}", source,
                    c.rope_theta);
  DSPARK_CHECK_KIND(io, c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1,
                    "{}: partial_rotary_factor must be in (0, 1], got {}", source,
                    c.partial_rotary_factor);

  RopeScaling& s = c.rope_scaling;
  s = RopeScaling{};
  std::optional<std::string> type = json_optional_string(r, "rope_type", rope_source);
  if (!type) type = json_optional_string(r, "type", rope_source);
  s.type = type.value_or("default");
  if (s.type == "default") return;
  DSPARK_CHECK_KIND(unsupported, s.type == "linear" || s.type == "llama3" || s.type == "yarn",
                    "{}: rope type '{}' is not supported (default, linear, llama3, yarn)", source,
                    s.type);

  if (s.type == "llama3" || s.type == "yarn") {
    // transformers gives a top-level original_max_position_embeddings priority (Phi-3 style).
    s.original_max_position_embeddings = static_cast<double>(
        positive_int(j, "original_max_position_embeddings", source,
                     json_optional_int(r, "original_max_position_embeddings", rope_source)
                         .value_or(c.max_position_embeddings)));
  }
  const std::optional<double> factor = json_optional_number(r, "factor", rope_source);
  if (s.type == "yarn") {
    s.factor = factor.value_or(c.max_position_embeddings / s.original_max_position_embeddings);
  } else {
    DSPARK_CHECK_KIND(io, factor.has_value(), "{}: missing required key 'factor'", rope_source);
    s.factor = *factor;
  }
  DSPARK_CHECK_KIND(io, s.factor > 0, "{}: factor must be positive, got {}", rope_source, s.factor);

  if (s.type == "llama3") {
    s.low_freq_factor = json_number(r, "low_freq_factor", rope_source);
    s.high_freq_factor = json_number(r, "high_freq_factor", rope_source);
    DSPARK_CHECK_KIND(io, s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0,
                      "{}: need 0 < low_freq_factor < high_freq_factor, got {} and {}", rope_source,
                      s.low_freq_factor, s.high_freq_factor);
  }
  if (s.type == "yarn") {
    // transformers: `get("beta_fast") or 32`, so 0 and null also mean the default.
    const double beta_fast = json_optional_number(r, "beta_fast", rope_source).value_or(0.0);
    const double beta_slow = json_optional_number(r, "beta_slow", rope_source).value_or(0.0);
    s.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
    s.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    s.mscale = json_optional_number(r, "mscale", rope_source).value_or(0.0);
    s.mscale_all_dim = json_optional_number(r, "mscale_all_dim", rope_source).value_or(0.0);
    s.attention_factor = json_optional_number(r, "attention_factor", rope_source).value_or(0.0);
    s.truncate = json_optional_bool(r, "truncate", rope_source).value_or(true);
  }
}

void parse_layer_windows(const json& j, std::string_view source, const ArchInfo& arch,
                         ModelConfig& c) {
  c.layer_window.assign(c.num_layers, 0);
  if (arch.window_rule == WindowRule::none) return;
  auto window_value = [&](int fallback) -> int {
    if (!j.contains("sliding_window")) return fallback;
    const std::optional<int64_t> w = json_optional_int(j, "sliding_window", source);
    if (!w) return 0;
    DSPARK_CHECK_KIND(io, *w > 0 && *w <= (int64_t{1} << 30),
                      "{}: sliding_window must be positive, got {}", source, *w);
    return static_cast<int>(*w);
  };
  if (arch.window_rule == WindowRule::mistral) {
    // MistralForCausalLM ignores `layer_types` (transformers warns and uses one window for all).
    std::fill(c.layer_window.begin(), c.layer_window.end(), window_value(kDefaultSlidingWindow));
    return;
  }
  // Qwen2 / Qwen3 / Qwen3-MoE: the window only exists when use_sliding_window is true.
  const bool use_sliding = json_optional_bool(j, "use_sliding_window", source).value_or(false);
  const int window = use_sliding ? window_value(kDefaultSlidingWindow) : 0;
  if (arch.window_rule == WindowRule::every_when_used) {
    std::fill(c.layer_window.begin(), c.layer_window.end(), window);
    return;
  }
  const auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    DSPARK_CHECK_KIND(io, types->is_array() && types->size() == static_cast<size_t>(c.num_layers),
                      "{}: layer_types must be a list of num_hidden_layers ({}) strings", source,
                      c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) {
      const json& t = (*types)[l];
      const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
      DSPARK_CHECK_KIND(unsupported, name == "full_attention" || name == "sliding_attention",
                        "{}: layer_types[{}] = '{}' is not supported (full_attention, "
                        "sliding_attention)",
                        source, l, name);
      c.layer_window[l] = name == "sliding_attention" ? window : 0;
    }
    return;
  }
  const int64_t first_sliding =
      json_optional_int(j, "max_window_layers", source).value_or(kDefaultMaxWindowLayers);
  for (int l = 0; l < c.num_layers; ++l) c.layer_window[l] = l >= first_sliding ? window : 0;
}

// The expert keys of a MoE architecture, and which layers have experts.
void parse_moe(const json& j, std::string_view source, ModelConfig& c) {
  // Newer transformers write the count as `num_local_experts` (Qwen3MoeConfig's attribute_map).
  c.num_experts = positive_int(j, j.contains("num_experts") ? "num_experts" : "num_local_experts",
                               source, kDefaultNumExperts);
  c.num_experts_per_tok = positive_int(j, "num_experts_per_tok", source, kDefaultExpertsPerToken);
  DSPARK_CHECK_KIND(io, c.num_experts_per_tok <= c.num_experts,
                    "{}: num_experts_per_tok ({}) exceeds num_experts ({})", source,
                    c.num_experts_per_tok, c.num_experts);
  c.moe_intermediate_size =
      positive_int(j, "moe_intermediate_size", source, kDefaultMoeIntermediate);
  c.norm_topk_prob = json_optional_bool(j, "norm_topk_prob", source).value_or(false);
  const int step = positive_int(j, "decoder_sparse_step", source, 1);
  std::vector<bool> dense(static_cast<size_t>(c.num_layers), false);
  const auto only = j.find("mlp_only_layers");
  if (only != j.end() && !only->is_null()) {
    DSPARK_CHECK_KIND(io, only->is_array(), "{}: mlp_only_layers must be a list of layer indices",
                      source);
    for (const json& v : *only) {
      DSPARK_CHECK_KIND(io, v.is_number_integer(),
                        "{}: mlp_only_layers must be a list of layer indices, got {}", source,
                        json_brief(*only));
      const int l = v.get<int>();
      DSPARK_CHECK_KIND(io, l >= 0 && l < c.num_layers,
                        "{}: mlp_only_layers entry {} is outside [0, {})", source, l, c.num_layers);
      dense[static_cast<size_t>(l)] = true;
    }
  }
  c.layer_moe.assign(static_cast<size_t>(c.num_layers), false);
  for (int l = 0; l < c.num_layers; ++l)
    c.layer_moe[static_cast<size_t>(l)] = !dense[static_cast<size_t>(l)] && (l + 1) % step == 0;
}

// An int >= 0 (`fallback` when absent).
int non_negative_int(const json& j, std::string_view key, std::string_view source, int fallback) {
  const int64_t v = json_optional_int(j, key, source).value_or(fallback);
  DSPARK_CHECK_KIND(io, v >= 0 && v <= (int64_t{1} << 30), "{}: key '{}' must be >= 0, got {}",
                    source, key, v);
  return static_cast<int>(v);
}

void parse_deepseek_moe(const json& j, std::string_view source, const DeepseekMoeDefaults& d,
                        ModelConfig& c);

// A per-layer list of two names (`off` / `on`) under `key`, when present and not null, into
// flags (already sized num_layers): true where the layer says `on`.
void layer_flags(const json& j, const char* key, std::string_view source, std::string_view off,
                 std::string_view on, std::vector<bool>& flags) {
  const auto types = j.find(key);
  if (types == j.end() || types->is_null()) return;
  DSPARK_CHECK_KIND(io, types->is_array() && types->size() == flags.size(),
                    "{}: {} must be a list of num_hidden_layers ({}) strings", source, key,
                    flags.size());
  for (size_t l = 0; l < flags.size(); ++l) {
    const json& t = (*types)[l];
    const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
    DSPARK_CHECK_KIND(io, name == off || name == on, "{}: {}[{}] = '{}' (expected {} or {})",
                      source, key, l, name, off, on);
    flags[l] = name == on;
  }
}

// DeepSeek-V3 and GLM-5: the MLA dimensions and the DeepSeek MoE keys (transformers'
// DeepseekV3Config / GlmMoeDsaConfig and the keys of the published checkpoints' config.json that
// change what transformers computes).
void parse_deepseek(const json& j, std::string_view source, bool dsa, ModelConfig& c) {
  const MlaDefaults& d = dsa ? kGlmMoeDsaMla : kDeepseekMla;
  // q_lora_rank null: queries straight from q_proj (DeepSeek-V2-Lite's layout).
  const auto q_lora = j.find("q_lora_rank");
  c.q_lora_rank = q_lora == j.end()   ? d.q_lora_rank
                  : q_lora->is_null() ? 0
                                      : positive_int(j, "q_lora_rank", source);
  c.kv_lora_rank = positive_int(j, "kv_lora_rank", source, d.kv_lora_rank);
  c.qk_nope_head_dim = positive_int(j, "qk_nope_head_dim", source, d.qk_nope_head_dim);
  c.qk_rope_head_dim = positive_int(j, "qk_rope_head_dim", source, d.qk_rope_head_dim);
  c.v_head_dim = positive_int(j, "v_head_dim", source, d.v_head_dim);
  // GLM-5 always rotates interleaved pairs (GlmMoeDsaAttention has no rope_interleave switch).
  c.rope_interleave = dsa || json_optional_bool(j, "rope_interleave", source).value_or(true);
  c.head_dim = c.qk_rope_head_dim;  // the rotary dimension (transformers: head_dim)
  DSPARK_CHECK_KIND(io, c.qk_rope_head_dim % 2 == 0, "{}: qk_rope_head_dim must be even, got {}",
                    source, c.qk_rope_head_dim);
  DSPARK_CHECK_KIND(unsupported, !json_optional_bool(j, "attention_bias", source).value_or(false),
                    "{}: attention_bias = true is not supported for {}", source, c.architecture);

  parse_deepseek_moe(j, source, dsa ? kGlmMoeDsaMoe : kDeepseekMoe, c);
}

// GLM-5's DSA indexer: index_topk / index_n_heads / index_head_dim and `indexer_types` ("full" or
// "shared" per layer; default: every layer full, GlmMoeDsaConfig's index_topk_freq 1).
void parse_glm_moe_dsa(const json& j, std::string_view source, ModelConfig& c) {
  DSPARK_CHECK_KIND(unsupported, c.q_lora_rank > 0,
                    "{}: {} needs q_lora_rank (the indexer's queries come from the q LoRA)", source,
                    c.architecture);
  c.index_topk = positive_int(j, "index_topk", source, kGlmMoeDsaIndexTopk);
  c.index_n_heads = positive_int(j, "index_n_heads", source, kGlmMoeDsaIndexHeads);
  c.index_head_dim = positive_int(j, "index_head_dim", source, kGlmMoeDsaIndexHeadDim);
  DSPARK_CHECK_KIND(io, c.index_head_dim >= c.qk_rope_head_dim,
                    "{}: index_head_dim ({}) is smaller than qk_rope_head_dim ({})", source,
                    c.index_head_dim, c.qk_rope_head_dim);
  c.index_shared.assign(static_cast<size_t>(c.num_layers), false);
  layer_flags(j, "indexer_types", source, "full", "shared", c.index_shared);
  DSPARK_CHECK_KIND(io, !c.index_shared.front(),
                    "{}: indexer_types[0] is 'shared' but no layer before it selects keys", source);
}

// GLM-4.5 (Glm4MoeForCausalLM): GQA attention (q/k/v biases with attention_bias, per-head q/k
// norms with use_qk_norm, partial rotary: parse_rope) and DeepSeek MoE.
void parse_glm4_moe(const json& j, std::string_view source, ModelConfig& c) {
  c.qk_norm = json_optional_bool(j, "use_qk_norm", source).value_or(false);
  parse_deepseek_moe(j, source, kGlm4Moe, c);
}

// DeepSeek MoE (DeepSeek-V3, GLM-4.5): the routed and shared experts, the routing groups and the
// first dense layers.
void parse_deepseek_moe(const json& j, std::string_view source, const DeepseekMoeDefaults& d,
                        ModelConfig& c) {
  c.moe_sigmoid_routing = true;
  const std::string scoring = json_optional_string(j, "scoring_func", source).value_or("sigmoid");
  DSPARK_CHECK_KIND(unsupported, scoring == "sigmoid",
                    "{}: scoring_func '{}' is not supported for {} (sigmoid)", source, scoring,
                    c.architecture);
  const std::string method = json_optional_string(j, "topk_method", source).value_or("noaux_tc");
  DSPARK_CHECK_KIND(unsupported, method == "noaux_tc",
                    "{}: topk_method '{}' is not supported for {} (noaux_tc)", source, method,
                    c.architecture);
  const int64_t freq = json_optional_int(j, "moe_layer_freq", source).value_or(1);
  DSPARK_CHECK_KIND(unsupported, freq == 1, "{}: moe_layer_freq {} is not supported (1)", source,
                    freq);
  c.num_experts = positive_int(j, "n_routed_experts", source, d.routed_experts);
  c.num_experts_per_tok = positive_int(j, "num_experts_per_tok", source, d.experts_per_token);
  c.moe_intermediate_size = positive_int(j, "moe_intermediate_size", source, d.moe_intermediate);
  c.n_shared_experts = non_negative_int(j, "n_shared_experts", source, d.shared_experts);
  c.n_group = positive_int(j, "n_group", source, d.n_group);
  c.topk_group = positive_int(j, "topk_group", source, d.topk_group);
  c.norm_topk_prob = json_optional_bool(j, "norm_topk_prob", source).value_or(true);
  c.routed_scaling_factor =
      json_optional_number(j, "routed_scaling_factor", source).value_or(d.routed_scaling);
  DSPARK_CHECK_KIND(io, c.routed_scaling_factor > 0 && std::isfinite(c.routed_scaling_factor),
                    "{}: routed_scaling_factor must be positive, got {}", source,
                    c.routed_scaling_factor);
  DSPARK_CHECK_KIND(io, c.num_experts % c.n_group == 0 && c.num_experts / c.n_group >= 2,
                    "{}: n_routed_experts ({}) must be a multiple of n_group ({}) with at least "
                    "2 experts per group",
                    source, c.num_experts, c.n_group);
  DSPARK_CHECK_KIND(io, c.topk_group <= c.n_group, "{}: topk_group ({}) exceeds n_group ({})",
                    source, c.topk_group, c.n_group);
  DSPARK_CHECK_KIND(io, c.num_experts_per_tok <= c.topk_group * (c.num_experts / c.n_group),
                    "{}: num_experts_per_tok ({}) exceeds the experts of topk_group ({}) groups",
                    source, c.num_experts_per_tok, c.topk_group);
  const int first_dense = non_negative_int(j, "first_k_dense_replace", source, d.first_dense);
  c.layer_moe.assign(static_cast<size_t>(c.num_layers), false);
  for (int l = first_dense; l < c.num_layers; ++l) c.layer_moe[static_cast<size_t>(l)] = true;
  // GLM-5: `mlp_layer_types` ("dense" / "sparse" per layer), when given, wins.
  layer_flags(j, "mlp_layer_types", source, "dense", "sparse", c.layer_moe);
}

ModelConfig parse_config(const json& j, std::string_view source) {
  DSPARK_CHECK_KIND(io, j.is_object(), "{}: expected a JSON object, got {}", source, json_brief(j));
  const auto archs = j.find("architectures");
  DSPARK_CHECK_KIND(io, archs != j.end() && !archs->is_null(),
                    "{}: missing required key 'architectures'", source);
  DSPARK_CHECK_KIND(io, archs->is_array() && !archs->empty() && (*archs)[0].is_string(),
                    "{}: key 'architectures' must be a non-empty list of strings, got {}", source,
                    json_brief(*archs));
  ModelConfig c;
  c.architecture = (*archs)[0].get<std::string>();
  const ArchInfo& arch = find_architecture(c.architecture, source);
  c.model_type =
      json_optional_string(j, "model_type", source).value_or(std::string(arch.model_type));

  c.vocab_size = positive_int(j, "vocab_size", source);
  c.hidden_size = positive_int(j, "hidden_size", source);
  c.intermediate_size = positive_int(j, "intermediate_size", source,
                                     arch.moe ? std::optional<int64_t>(kDefaultMoeDenseIntermediate)
                                     : arch.dsa ? std::optional<int64_t>(kGlmMoeDsaIntermediate)
                                     : arch.deepseek ? std::optional<int64_t>(kDeepseekIntermediate)
                                     : arch.glm_moe  ? std::optional<int64_t>(kGlm4MoeIntermediate)
                                                     : std::nullopt);
  c.num_layers = positive_int(j, "num_hidden_layers", source);
  if (arch.moe) parse_moe(j, source, c);
  c.num_heads = positive_int(j, "num_attention_heads", source);
  c.num_kv_heads =
      positive_int(j, "num_key_value_heads", source,
                   arch.default_num_kv_heads > 0 ? arch.default_num_kv_heads : c.num_heads);
  DSPARK_CHECK_KIND(io, c.num_heads % c.num_kv_heads == 0,
                    "{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                    source, c.num_heads, c.num_kv_heads);
  // head_dim: given, else the architecture's default (Qwen3: 128), else hidden_size / num_heads.
  if (arch.deepseek) {
    // parse_deepseek: qk_rope_head_dim.
  } else if (json_optional_int(j, "head_dim", source).has_value()) {
    c.head_dim = positive_int(j, "head_dim", source);
  } else if (arch.default_head_dim > 0 && !j.contains("head_dim")) {
    c.head_dim = arch.default_head_dim;
  } else {
    DSPARK_CHECK_KIND(io, c.hidden_size % c.num_heads == 0,
                      "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no "
                      "head_dim is given",
                      source, c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }

  c.rms_norm_eps = json_optional_number(j, "rms_norm_eps", source)
                       .value_or(arch.glm_moe ? kGlm4MoeRmsNormEps
                                 : arch.dsa   ? kGlmMoeDsaRmsNormEps
                                              : 1e-6);
  DSPARK_CHECK_KIND(io, c.rms_norm_eps > 0, "{}: rms_norm_eps must be positive, got {}", source,
                    c.rms_norm_eps);
  c.max_position_embeddings =
      positive_int(j, "max_position_embeddings", source, arch.default_max_position_embeddings);
  c.tie_word_embeddings = json_optional_bool(j, "tie_word_embeddings", source).value_or(false);
  c.attention_bias =
      arch.qkv_bias_always || json_optional_bool(j, "attention_bias", source).value_or(false);
  c.qk_norm = arch.qk_norm;

  const std::string act = json_optional_string(j, "hidden_act", source).value_or("silu");
  DSPARK_CHECK_KIND(unsupported, act == "silu", "{}: hidden_act '{}' is not supported (silu)",
                    source, act);
  DSPARK_CHECK_KIND(unsupported, !json_optional_bool(j, "mlp_bias", source).value_or(false),
                    "{}: mlp_bias = true is not supported", source);

  if (arch.deepseek) parse_deepseek(j, source, arch.dsa, c);
  if (arch.dsa) parse_glm_moe_dsa(j, source, c);
  if (arch.glm_moe) parse_glm4_moe(j, source, c);

  parse_rope(j, source, c, arch.glm_moe ? kGlm4MoePartialRotary : 1.0);
  const int rotary_dim = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  DSPARK_CHECK_KIND(io, rotary_dim >= 2 && rotary_dim % 2 == 0,
                    "{}: head_dim {} x partial_rotary_factor {} gives an odd rotary dimension {}",
                    source, c.head_dim, c.partial_rotary_factor, rotary_dim);
  parse_layer_windows(j, source, arch, c);

  c.torch_dtype = parse_torch_dtype(j, source);
  c.bos_token_id = token_id(j, "bos_token_id", source, arch.default_bos_token_id);
  c.pad_token_id = token_id(j, "pad_token_id", source, -1);
  c.eos_token_ids = token_id_list(j, "eos_token_id", source, arch.default_eos_token_id);
  if (arch.deepseek || arch.glm_moe)
    c.num_nextn_predict_layers = non_negative_int(j, "num_nextn_predict_layers", source, 0);
  return c;
}

}  // namespace

float mla_softmax_scale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim));
  const RopeScaling& s = c.rope_scaling;
  if (s.type != "default" && s.mscale_all_dim != 0.0 && s.factor > 1.0) {
    const double mscale = 0.1 * s.mscale_all_dim * std::log(s.factor) + 1.0;
    scale *= mscale * mscale;
  }
  return static_cast<float>(scale);
}

ModelConfig parse_model_config(const json& json_doc) {
  return parse_config(json_doc, "config.json");
}

ModelConfig load_model_config(const fs::path& model_dir) {
  std::error_code ec;
  DSPARK_CHECK_KIND(io, fs::is_directory(model_dir, ec), "{}: model directory not found",
                    model_dir.string());
  const fs::path file = model_dir / "config.json";
  ModelConfig c = parse_config(read_json_file(file), file.string());
  c.checkpoint_path = model_dir;
  return c;
}

GenerationDefaults load_generation_defaults(const fs::path& model_dir) {
  GenerationDefaults g;
  std::error_code ec;
  const fs::path file = model_dir / "generation_config.json";
  if (fs::is_regular_file(file, ec)) {
    const json j = read_json_file(file);
    const std::string source = file.string();
    DSPARK_CHECK_KIND(io, j.is_object(), "{}: expected a JSON object", source);
    g.eos_token_ids = token_id_list(j, "eos_token_id", source, -1);
    g.temperature = static_cast<float>(json_optional_number(j, "temperature", source).value_or(-1));
    g.top_p = static_cast<float>(json_optional_number(j, "top_p", source).value_or(-1));
    g.top_k = static_cast<int>(json_optional_int(j, "top_k", source).value_or(-1));
    g.min_p = static_cast<float>(json_optional_number(j, "min_p", source).value_or(-1));
    g.do_sample = json_optional_bool(j, "do_sample", source).value_or(false);
  }
  // Merge the model config's eos ids (generation config first, then any it does not list).
  const fs::path config_file = model_dir / "config.json";
  if (fs::is_regular_file(config_file, ec)) {
    const json j = read_json_file(config_file);
    if (j.is_object()) {
      for (int id : token_id_list(j, "eos_token_id", config_file.string(), -1))
        if (std::find(g.eos_token_ids.begin(), g.eos_token_ids.end(), id) == g.eos_token_ids.end())
          g.eos_token_ids.push_back(id);
    }
  }
  return g;
}

}  // namespace dspark
