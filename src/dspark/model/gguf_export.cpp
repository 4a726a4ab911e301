#include "dspark/model/gguf_export.h"

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/core/quant_encode.h"
#include "dspark/io/gguf_writer.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_model.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace fs = std::filesystem;
namespace {

struct Planned {
  std::string hf;  // the checkpoint's name ("" for rope_freqs, computed)
  GgufTensorOut out;
  int qk_heads = 0;  // q/k projections: heads whose rows are reordered
};

void check_exportable(const ModelConfig& c, const fs::path& dir) {
  const std::string where = (dir / "config.json").string();
  DSPARK_CHECK_KIND(unsupported,
                    c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM",
                    "{}: GGUF output is for the `llama` architecture (LlamaForCausalLM, "
                    "MistralForCausalLM), not {}",
                    where, c.architecture);
  DSPARK_CHECK_KIND(unsupported, !c.attention_bias && !c.qk_norm,
                    "{}: q/k/v biases and q/k norms have no GGUF `llama` tensors", where);
  for (int w : c.layer_window) {
    DSPARK_CHECK_KIND(unsupported, w == 0,
                      "{}: sliding-window layers cannot be written to a GGUF `llama` file", where);
  }
  const std::string& rope = c.rope_scaling.type;
  DSPARK_CHECK_KIND(unsupported, rope == "default" || rope == "linear" || rope == "llama3",
                    "{}: rope scaling '{}' cannot be written to GGUF (supported: none, linear, "
                    "llama3)",
                    where, rope);
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

int file_type_of(QuantType t) {  // llama.cpp's "mostly <type>" file types
  switch (t) {
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
    case QuantType::q6_k:
      return 18;
    default:
      return 7;  // Q8_0
  }
}

std::vector<std::pair<std::string, GgufValue>> metadata_of(const ModelConfig& c, QuantType type,
                                                           const fs::path& input) {
  const int rotary = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  std::vector<std::pair<std::string, GgufValue>> m = {
      {"general.architecture", gguf_string("llama")},
      {"general.name", gguf_string(input.filename().string())},
      {"general.file_type", gguf_u32(file_type_of(type))},
      {"general.quantization_version", gguf_u32(2)},
      {"llama.vocab_size", gguf_u32(c.vocab_size)},
      {"llama.context_length", gguf_u32(c.max_position_embeddings)},
      {"llama.embedding_length", gguf_u32(c.hidden_size)},
      {"llama.block_count", gguf_u32(c.num_layers)},
      {"llama.feed_forward_length", gguf_u32(c.intermediate_size)},
      {"llama.attention.head_count", gguf_u32(c.num_heads)},
      {"llama.attention.head_count_kv", gguf_u32(c.num_kv_heads)},
      {"llama.attention.key_length", gguf_u32(c.head_dim)},
      {"llama.attention.value_length", gguf_u32(c.head_dim)},
      {"llama.attention.layer_norm_rms_epsilon", gguf_f32(c.rms_norm_eps)},
      {"llama.rope.dimension_count", gguf_u32(rotary)},
      {"llama.rope.freq_base", gguf_f32(c.rope_theta)}};
  if (c.rope_scaling.type == "linear") {
    m.emplace_back("llama.rope.scaling.type", gguf_string("linear"));
    m.emplace_back("llama.rope.scaling.factor", gguf_f32(c.rope_scaling.factor));
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

}  // namespace

std::optional<QuantType> gguf_format_type(std::string_view format) {
  if (format == "q8_0") return QuantType::q8_0;
  if (format == "q4_0") return QuantType::q4_0;
  if (format == "q4_1") return QuantType::q4_1;
  if (format == "q5_0") return QuantType::q5_0;
  if (format == "q5_1") return QuantType::q5_1;
  if (format == "q4_k") return QuantType::q4_k;
  if (format == "q6_k") return QuantType::q6_k;
  return std::nullopt;
}

QuantizeSummary export_gguf(const QuantizeOptions& o, QuantType type,
                            const std::function<void(const QuantizeProgress&)>& progress) {
  check_quantize_input(o.input);
  const ModelConfig c = load_model_config(o.input);
  check_exportable(c, o.input);
  const SafeTensors st = SafeTensors::open(o.input);
  const GgmlType block_type = ggml_type_of(type);
  const int64_t block_values = quant_block(type).elements;
  QuantizeSummary summary;
  std::vector<Planned> plan;
  for (const std::string& name : st.names()) {
    if (name == "lm_head.weight" && c.tie_word_embeddings) continue;  // the embedding is the head
    const std::optional<std::string> gguf = gguf_name_of(name);
    DSPARK_CHECK_KIND(unsupported, gguf.has_value(),
                      "{}: tensor '{}' has no GGUF `llama` counterpart", o.input.string(), name);
    const Tensor t = st.get(name);
    DSPARK_CHECK_KIND(unsupported, dtype_is_float(t.dtype()),
                      "{}: tensor '{}' ({} {}) looks quantized already; dspark quantize needs a "
                      "float checkpoint",
                      st.path().string(), name, dtype_name(t.dtype()), t.shape().str());
    Planned p{name, GgufTensorOut{*gguf, GgmlType::f32, t.shape()}, 0};
    if (t.dim() == 2 && t.size(1) % block_values == 0) {
      p.out.type = block_type;
      ++summary.n_quantized;
    } else {
      if (t.dim() == 2) summary.not_divisible.push_back(name);
      ++summary.n_copied;
    }
    if (name.find(".self_attn.q_proj.") != std::string::npos) p.qk_heads = c.num_heads;
    if (name.find(".self_attn.k_proj.") != std::string::npos) p.qk_heads = c.num_kv_heads;
    summary.bytes_in += static_cast<int64_t>(t.nbytes());
    plan.push_back(std::move(p));
  }
  std::vector<float> rope_factors;
  if (c.rope_scaling.type == "llama3") {
    rope_factors = llama3_rope_factors(c);
    plan.push_back(
        {"",
         {"rope_freqs.weight", GgmlType::f32, Shape{static_cast<int64_t>(rope_factors.size())}},
         0});
    ++summary.n_copied;
  }
  const std::vector<std::pair<std::string, GgufValue>> metadata = metadata_of(c, type, o.input);
  create_quantize_output(o.output);

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
    } else {
      const Tensor t = st.get(p.hf);
      std::vector<float> w(static_cast<size_t>(t.numel()));
      convert_host(t.data(), t.dtype(), w.data(), DType::f32, t.numel());
      if (p.qk_heads > 0) permute_gguf_qk_rows(w, p.qk_heads, t.size(0), t.size(1));
      if (p.out.type == GgmlType::f32) {
        std::memcpy(dst, w.data(), w.size() * sizeof(float));
      } else {
        quantize_blocks(type, w.data(), t.numel() / block_values, dst);
      }
      pr.bytes_done += static_cast<int64_t>(t.nbytes());
    }
    if (progress) progress(pr);
  });
  summary.files.push_back(file);
  return summary;
}

}  // namespace dspark
