#include "dspark/model/gguf_export.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/core/quant_encode.h"
#include "dspark/io/gguf_writer.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_export_deepseek.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/mla.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace fs = std::filesystem;
namespace {

struct Planned {
  // The checkpoint's name, or the experts' names of a stacked tensor (expert by expert); empty for
  // rope_freqs (computed).
  std::vector<std::string> hf;
  GgufTensorOut out;
  int qk_heads = 0;                // q/k projections: heads whose rows are reordered
  std::optional<QuantType> quant;  // the block type, nullopt: F32
  int kv_b = 0;                    // deepseek2's kv_b_proj written as 1: attn_k_b, 2: attn_v_b
};

// The GGUF architecture a checkpoint is written as (llama.cpp's names), after the checks: Llama /
// Mistral as `llama` (no biases, no q/k norms, rope none / linear / llama3), Qwen2 as `qwen2`
// (q/k/v biases), Qwen3 as `qwen3` and Qwen3-MoE as `qwen3moe` (q/k norms); rope none / linear /
// yarn (and llama3 for `llama`); no sliding windows. DeepSeek-V3 as `deepseek2`, GLM-4.5 as
// `glm4moe` (q/k/v biases and q/k norms) and GLM-5 as `glm-dsa`, after check_deepseek_gguf.
std::string gguf_architecture(const ModelConfig& c, const fs::path& dir) {
  const std::string where = (dir / "config.json").string();
  const std::string arch =
      c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM" ? "llama"
      : c.architecture == "Qwen2ForCausalLM"                                         ? "qwen2"
      : c.architecture == "Qwen3ForCausalLM"                                         ? "qwen3"
      : c.architecture == "Qwen3MoeForCausalLM"                                      ? "qwen3moe"
                                                : deepseek_gguf_architecture(c);
  DSPARK_CHECK_KIND(unsupported, !arch.empty(),
                    "{}: GGUF output is for LlamaForCausalLM, MistralForCausalLM, "
                    "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                    "DeepseekV3ForCausalLM, Glm4MoeForCausalLM and GlmMoeDsaForCausalLM, not {}",
                    where, c.architecture);
  DSPARK_CHECK_KIND(unsupported, arch == "qwen2" || arch == "glm4moe" || !c.attention_bias,
                    "{}: q/k/v biases have no GGUF `{}` tensors", where, arch);
  DSPARK_CHECK_KIND(unsupported, arch.starts_with("qwen3") || arch == "glm4moe" || !c.qk_norm,
                    "{}: q/k norms have no GGUF `{}` tensors", where, arch);
  for (int w : c.layer_window) {
    DSPARK_CHECK_KIND(unsupported, w == 0,
                      "{}: sliding-window layers cannot be written to a GGUF `{}` file", where,
                      arch);
  }
  if (!deepseek_gguf_architecture(c).empty()) {
    check_deepseek_gguf(c, arch, where);
    return arch;
  }
  const RopeScaling& rope = c.rope_scaling;
  DSPARK_CHECK_KIND(unsupported,
                    rope.type == "default" || rope.type == "linear" || rope.type == "yarn" ||
                        (arch == "llama" && rope.type == "llama3"),
                    "{}: rope scaling '{}' cannot be written to a GGUF `{}` file (supported: "
                    "none, linear, yarn{})",
                    where, rope.type, arch, arch == "llama" ? ", llama3" : "");
  // GGUF's YaRN keys hold the factor, the original context and the betas; the attention factor is
  // derived from the factor (0.1 ln(factor) + 1), and the correction range truncated.
  DSPARK_CHECK_KIND(unsupported,
                    rope.type != "yarn" || (rope.mscale == 0 && rope.mscale_all_dim == 0 &&
                                            rope.attention_factor == 0 && rope.truncate),
                    "{}: YaRN with mscale, mscale_all_dim, attention_factor or truncate: false "
                    "cannot be written to a GGUF `{}` file",
                    where, arch);
  return arch;
}

// llama3 rope scaling as GGUF stores it: per frequency, the factor that divides the plain
// inverse frequency.
std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  const RopeTable plain = make_rope_table(c.head_dim, c.rope_theta, c.partial_rotary_factor,
                                          RopeScaling{}, c.max_position_embeddings);
  const RopeTable scaled = make_rope_table(c.head_dim, c.rope_theta, c.partial_rotary_factor,
                                           c.rope_scaling, c.max_position_embeddings);
  std::vector<float> f(plain.inv_freq.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = plain.inv_freq[i] / scaled.inv_freq[i];
  return f;
}

int file_type_of(const GgufFormat& f) {  // llama.cpp's "mostly <type>" file types
  if (f.medium) return f.base == QuantType::q5_k ? 17 : 15;  // Q5_K_M, Q4_K_M
  switch (f.base) {
    case QuantType::q4_0:
      return 2;
    case QuantType::q4_1:
      return 3;
    case QuantType::q5_0:
      return 8;
    case QuantType::q5_1:
      return 9;
    case QuantType::q4_k:
      return 14;  // "Q4_K_S": every weight Q4_K
    case QuantType::q5_k:
      return 16;  // "Q5_K_S"
    case QuantType::q6_k:
      return 18;
    default:
      return 7;  // Q8_0
  }
}

std::vector<std::pair<std::string, GgufValue>> metadata_of(const ModelConfig& c,
                                                           const std::string& arch,
                                                           const GgufFormat& format,
                                                           const fs::path& input, int nextn) {
  const std::string p = arch + ".";
  const int rotary = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  std::vector<std::pair<std::string, GgufValue>> m = {
      {"general.architecture", gguf_string(arch)},
      {"general.name", gguf_string(input.filename().string())},
      {"general.file_type", gguf_u32(file_type_of(format))},
      {"general.quantization_version", gguf_u32(2)},
      {p + "vocab_size", gguf_u32(c.vocab_size)},
      {p + "context_length", gguf_u32(c.max_position_embeddings)},
      {p + "embedding_length", gguf_u32(c.hidden_size)},
      {p + "block_count", gguf_u32(c.num_layers + nextn)},
      {p + "feed_forward_length", gguf_u32(c.intermediate_size)},
      {p + "attention.head_count", gguf_u32(c.num_heads)},
      {p + "attention.layer_norm_rms_epsilon", gguf_f32(c.rms_norm_eps)},
      {p + "rope.freq_base", gguf_f32(c.rope_theta)}};
  if (!deepseek_gguf_architecture(c).empty()) {
    add_deepseek_gguf_metadata(c, arch, nextn, m);
  } else {
    m.emplace_back(p + "attention.head_count_kv", gguf_u32(c.num_kv_heads));
    m.emplace_back(p + "attention.key_length", gguf_u32(c.head_dim));
    m.emplace_back(p + "attention.value_length", gguf_u32(c.head_dim));
    m.emplace_back(p + "rope.dimension_count", gguf_u32(rotary));
  }
  if (arch == "qwen3moe") {  // llama.cpp's qwen3moe keys; dense layers use feed_forward_length
    m.emplace_back(p + "expert_count", gguf_u32(c.num_experts));
    m.emplace_back(p + "expert_used_count", gguf_u32(c.num_experts_per_tok));
    m.emplace_back(p + "expert_feed_forward_length", gguf_u32(c.moe_intermediate_size));
    m.emplace_back(p + "expert_weights_norm", gguf_bool(c.norm_topk_prob));
  }
  const RopeScaling& rope = c.rope_scaling;
  if (rope.type == "linear" || rope.type == "yarn") {
    m.emplace_back(p + "rope.scaling.type", gguf_string(rope.type));
    m.emplace_back(p + "rope.scaling.factor", gguf_f32(rope.factor));
  }
  if (rope.type == "yarn") {
    m.emplace_back(p + "rope.scaling.original_context_length",
                   gguf_u32(static_cast<int64_t>(rope.original_max_position_embeddings)));
    m.emplace_back(p + "rope.scaling.yarn_beta_fast", gguf_f32(rope.beta_fast));
    m.emplace_back(p + "rope.scaling.yarn_beta_slow", gguf_f32(rope.beta_slow));
  }
  for (auto& kv : gguf_tokenizer_metadata(input, c.vocab_size)) m.push_back(std::move(kv));
  const char* eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                            "tokenizer.ggml.eom_token_id"};
  for (size_t i = 0; i < c.eos_token_ids.size() && i < std::size(eos_keys); ++i)
    m.emplace_back(eos_keys[i], gguf_u32(c.eos_token_ids[i]));
  if (c.pad_token_id >= 0)
    m.emplace_back("tokenizer.ggml.padding_token_id", gguf_u32(c.pad_token_id));
  return m;
}

// llama-quantize's layers that get more bits in the medium mixes: the first and last eighth, and
// every third layer between.
bool more_bits_layer(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The layer of "model.layers.<i>.", or -1.
int layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  int layer = 0;
  size_t i = kPrefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
    layer = layer * 10 + (name[i] - '0');
  return layer;
}

// The 32-value type a k-quant falls back to when a row is not a multiple of 256 (llama.cpp's).
QuantType legacy_fallback(QuantType t) {
  switch (t) {
    case QuantType::q4_k:
      return QuantType::q5_0;
    case QuantType::q5_k:
      return QuantType::q5_1;
    default:
      return QuantType::q8_0;
  }
}

// An expert's projection "model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight".
struct ExpertName {
  int layer = 0, expert = 0;
  std::string_view proj;  // "gate", "up" or "down"
};
std::optional<ExpertName> expert_name_of(std::string_view name) {
  constexpr std::string_view kExperts = ".mlp.experts.";
  const int layer = layer_of(name);
  const size_t at = name.find(kExperts);
  if (layer < 0 || at == std::string_view::npos) return std::nullopt;
  size_t i = at + kExperts.size();
  const size_t digits = i;
  int expert = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && i - digits < 9; ++i)
    expert = expert * 10 + (name[i] - '0');
  if (i == digits) return std::nullopt;
  for (std::string_view proj : {"gate", "up", "down"}) {
    if (name.substr(i) == fmt::format(".{}_proj.weight", proj))
      return ExpertName{layer, expert, proj};
  }
  return std::nullopt;
}

// llama.cpp's 70B model type, which llama-quantize's medium mixes give a wider v_proj.
bool is_70b(const ModelConfig& c, const std::string& arch) {
  return c.num_layers == 80 &&
         ((arch == "llama" && c.num_kv_heads != c.num_heads) || arch == "qwen2");
}

}  // namespace

std::optional<QuantType> gguf_weight_type(const GgufFormat& format, std::string_view hf_name,
                                          int64_t cols, const GgufMixModel& model) {
  if (hf_name.ends_with(".mlp.gate.weight")) return std::nullopt;  // a MoE router stays F32
  QuantType type = format.base;
  if (format.medium) {
    const bool head =
        hf_name == "lm_head.weight" || (model.tied && hf_name == "model.embed_tokens.weight");
    const bool v = hf_name.ends_with(".self_attn.v_proj.weight");
    // down_proj, the experts' and the shared experts' too (llama.cpp: every `ffn_down*`).
    const bool down =
        hf_name.find(".mlp.") != std::string_view::npos && hf_name.ends_with("down_proj.weight");
    const int layer = layer_of(hf_name);
    const bool more_bits = layer >= 0 && more_bits_layer(layer, model.n_layers);
    if (head || ((v || down) && more_bits)) type = QuantType::q6_k;
    if (v && model.is_70b && type == QuantType::q4_k) type = QuantType::q5_k;
    if (model.experts == 8) {  // llama-quantize's rule for 8-expert models (Mixtral's shape)
      if (v || hf_name.ends_with(".self_attn.k_proj.weight")) type = QuantType::q8_0;
      if (hf_name.ends_with(".self_attn.o_proj.weight") && format.base == QuantType::q4_k)
        type = QuantType::q5_k;
    }
    if (cols % quant_block(type).elements != 0) type = legacy_fallback(type);
  }
  if (cols % quant_block(type).elements != 0) return std::nullopt;
  return type;
}

std::optional<GgufFormat> gguf_format(std::string_view format) {
  if (format == "q4_k_m") return GgufFormat{QuantType::q4_k, true};
  if (format == "q5_k_m") return GgufFormat{QuantType::q5_k, true};
  if (const std::optional<QuantType> t = gguf_format_type(format)) return GgufFormat{*t, false};
  return std::nullopt;
}

std::optional<QuantType> gguf_format_type(std::string_view format) {
  if (format == "q8_0") return QuantType::q8_0;
  if (format == "q4_0") return QuantType::q4_0;
  if (format == "q4_1") return QuantType::q4_1;
  if (format == "q5_0") return QuantType::q5_0;
  if (format == "q5_1") return QuantType::q5_1;
  if (format == "q4_k") return QuantType::q4_k;
  if (format == "q5_k") return QuantType::q5_k;
  if (format == "q6_k") return QuantType::q6_k;
  return std::nullopt;
}

QuantizeSummary export_gguf(const QuantizeOptions& o, const GgufFormat& format,
                            const std::function<void(const QuantizeProgress&)>& progress) {
  check_quantize_input(o.input);
  const ModelConfig c = load_model_config(o.input);
  const std::string arch = gguf_architecture(c, o.input);
  const SafeTensors st = SafeTensors::open(o.input);
  const bool deepseek = !deepseek_gguf_architecture(c).empty();
  const int nextn =
      deepseek
          ? deepseek_gguf_nextn(
                c, arch, st.contains(fmt::format("model.layers.{}.eh_proj.weight", c.num_layers)))
          : 0;
  // llama-quantize counts the next-token layers among the layers of its rules.
  const GgufMixModel mix{c.num_layers + nextn, c.tie_word_embeddings, c.num_experts,
                         is_70b(c, arch)};
  QuantizeSummary summary;
  std::vector<Planned> plan;
  std::map<std::string, size_t> stacks;  // GGUF name -> plan index, of the experts' tensors
  for (const std::string& name : st.names()) {
    if (name == "lm_head.weight" && c.tie_word_embeddings) continue;  // the embedding is the head
    const Tensor t = st.get(name);
    DSPARK_CHECK_KIND(unsupported, dtype_is_float(t.dtype()),
                      "{}: tensor '{}' ({} {}) looks quantized already; dspark quantize needs a "
                      "float checkpoint",
                      st.path().string(), name, dtype_name(t.dtype()), t.shape().str());
    summary.bytes_in += static_cast<int64_t>(t.nbytes());
    if (const std::optional<ExpertName> e = expert_name_of(name)) {
      DSPARK_CHECK_KIND(io, t.dim() == 2 && e->expert < c.num_experts,
                        "{}: tensor '{}' ({}) is not a projection of one of the {} experts",
                        o.input.string(), name, t.shape().str(), c.num_experts);
      const std::string gguf = fmt::format("blk.{}.ffn_{}_exps.weight", e->layer, e->proj);
      const auto [at, fresh] = stacks.emplace(gguf, plan.size());
      if (fresh) {
        Planned p{std::vector<std::string>(static_cast<size_t>(c.num_experts)),
                  GgufTensorOut{gguf, GgmlType::f32, Shape{c.num_experts, t.size(0), t.size(1)}}, 0,
                  gguf_weight_type(format, name, t.size(1), mix)};
        if (p.quant) p.out.type = ggml_type_of(*p.quant);
        plan.push_back(std::move(p));
      }
      Planned& p = plan[at->second];
      DSPARK_CHECK_KIND(io, t.size(0) == p.out.shape[1] && t.size(1) == p.out.shape[2],
                        "{}: tensor '{}' is {}, the other experts' {} are [{}, {}]",
                        o.input.string(), name, t.shape().str(), e->proj, p.out.shape[1],
                        p.out.shape[2]);
      p.hf[static_cast<size_t>(e->expert)] = name;
      ++(p.quant ? summary.n_quantized : summary.n_copied);
      if (!p.quant) summary.not_divisible.push_back(name);
      continue;
    }
    if (c.mla() && name.ends_with(".self_attn.kv_b_proj.weight")) {
      // Per head: attn_k_b [heads, r, nope] (the keys transposed), attn_v_b [heads, v, r].
      const std::string blk = gguf_name_of(name).value();  // blk.N.attn_kv_b.weight
      const std::string stem = blk.substr(0, blk.size() - std::string("kv_b.weight").size());
      const int64_t h = c.num_heads, r = c.kv_lora_rank;
      DSPARK_CHECK_KIND(
          io,
          t.dim() == 2 && t.size(0) == h * (c.qk_nope_head_dim + c.v_head_dim) && t.size(1) == r,
          "{}: tensor '{}' is {}, expected [{}, {}]", o.input.string(), name, t.shape().str(),
          h * (c.qk_nope_head_dim + c.v_head_dim), r);
      for (const int half : {1, 2}) {
        const Shape shape = half == 1 ? Shape{h, r, c.qk_nope_head_dim} : Shape{h, c.v_head_dim, r};
        Planned p{
            {name},
            GgufTensorOut{stem + (half == 1 ? "k_b.weight" : "v_b.weight"), GgmlType::f32, shape},
            0,
            gguf_weight_type(format, name, shape[2], mix),
            half};
        if (p.quant) p.out.type = ggml_type_of(*p.quant);
        plan.push_back(std::move(p));
      }
      ++(plan.back().quant ? summary.n_quantized : summary.n_copied);
      continue;
    }
    std::optional<std::string> gguf = deepseek ? deepseek_gguf_name(arch, name) : std::nullopt;
    if (!gguf) gguf = gguf_name_of(name);
    DSPARK_CHECK_KIND(unsupported, gguf.has_value(), "{}: tensor '{}' has no GGUF `{}` counterpart",
                      o.input.string(), name, arch);
    Planned p{{name}, GgufTensorOut{*gguf, GgmlType::f32, t.shape()}, 0, std::nullopt};
    if (t.dim() == 2) p.quant = gguf_weight_type(format, name, t.size(1), mix);
    if (p.quant) {
      p.out.type = ggml_type_of(*p.quant);
      ++summary.n_quantized;
    } else {
      if (t.dim() == 2 && !name.ends_with(".mlp.gate.weight"))
        summary.not_divisible.push_back(name);
      ++summary.n_copied;
    }
    // llama.cpp interleaves Llama's q/k rows for its RoPE; Qwen's stay as stored.
    if (arch == "llama" && name.find(".self_attn.q_proj.") != std::string::npos)
      p.qk_heads = c.num_heads;
    if (arch == "llama" && name.find(".self_attn.k_proj.") != std::string::npos)
      p.qk_heads = c.num_kv_heads;
    plan.push_back(std::move(p));
  }
  for (const auto& [gguf, index] : stacks) {
    const std::vector<std::string>& parts = plan[index].hf;
    const auto missing = std::find(parts.begin(), parts.end(), std::string());
    DSPARK_CHECK_KIND(
        io, missing == parts.end(),
        "{}: expert {} has no tensor for GGUF `{}` (every one of the {} experts needs "
        "one)",
        o.input.string(), missing - parts.begin(), gguf, c.num_experts);
  }
  std::vector<float> rope_factors;
  if (c.rope_scaling.type == "llama3") {
    rope_factors = llama3_rope_factors(c);
    plan.push_back(
        {{},
         {"rope_freqs.weight", GgmlType::f32, Shape{static_cast<int64_t>(rope_factors.size())}},
         0,
         std::nullopt});
    ++summary.n_copied;
  }
  const std::vector<std::pair<std::string, GgufValue>> metadata =
      metadata_of(c, arch, format, o.input, nextn);
  QuantizeOutput out(o.output);

  std::vector<GgufTensorOut> outs;
  for (const Planned& p : plan) {
    outs.push_back(p.out);
    summary.bytes_out += gguf_tensor_bytes(p.out.type, p.out.shape);
  }
  QuantizeProgress pr;
  pr.tensors_total = static_cast<int64_t>(plan.size());
  pr.bytes_total = summary.bytes_in;
  if (progress) progress(pr);
  const fs::path file = o.output / "model.gguf";
  write_gguf(file, metadata, outs, [&](size_t i, uint8_t* dst) {
    const Planned& p = plan[i];
    pr.tensors_done += 1;
    pr.tensor = p.out.name;
    if (p.hf.empty()) {  // rope_freqs
      std::memcpy(dst, rope_factors.data(), rope_factors.size() * sizeof(float));
    }
    // One weight, or the experts' one after the other.
    for (const std::string& name : p.hf) {
      const Tensor t = st.get(name);
      std::vector<float> w(static_cast<size_t>(t.numel()));
      convert_host(t.data(), t.dtype(), w.data(), DType::f32, t.numel());
      if (p.qk_heads > 0) permute_gguf_qk_rows(w, p.qk_heads, t.size(0), t.size(1));
      if (p.kv_b > 0) {
        KvBSplit split =
            split_kv_b(w, c.num_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank);
        w = std::move(p.kv_b == 1 ? split.uk_t : split.uv);
      }
      const auto n = static_cast<int64_t>(w.size());
      if (p.quant) check_finite_weight(name, w.data(), n);
      if (p.out.type == GgmlType::f32) {
        std::memcpy(dst, w.data(), w.size() * sizeof(float));
      } else {
        quantize_blocks(*p.quant, w.data(), n / quant_block(*p.quant).elements, dst);
      }
      dst += p.kv_b > 0 ? gguf_tensor_bytes(p.out.type, p.out.shape)
                        : gguf_tensor_bytes(p.out.type, t.shape());
      if (p.kv_b != 1) pr.bytes_done += static_cast<int64_t>(t.nbytes());  // kv_b: read twice
    }
    if (progress) progress(pr);
  });
  summary.files.push_back(file);
  out.commit();
  return summary;
}

}  // namespace dspark
