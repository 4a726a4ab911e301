// `dspark quantize --format q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m|q5_k_m`: a float
// Hugging Face checkpoint of a Llama-family, Qwen3-MoE, DeepSeek-V3, GLM-4.5 or GLM-5 model
// written as a GGUF file of llama.cpp's `llama`, `qwen2`, `qwen3`, `qwen3moe`, `deepseek2`,
// `glm4moe` or `glm-dsa` architecture (what model/gguf_model.h loads; the DeepSeek family's layout:
// model/gguf_export_deepseek.h), with the writer of io/gguf_writer.h and the block quantizers of
// core/quant_encode.h. See docs/quantization.md.
//
// OUT/model.gguf gets: the hyper-parameters; the tokenizer (gguf_tokenizer_metadata: byte-level
// BPE only); every 2-D weight in the chosen type (q/k rows in llama.cpp's interleaved RoPE order
// for `llama`), or in F32 when its last dim is not a multiple of the type's block (32 values, 256
// for the k-quants); the experts of a MoE layer stacked into one [experts, rows, cols] tensor per
// projection (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`) and the router (`ffn_gate_inp`)
// in F32, as llama-quantize leaves it; with a medium mix (q4_k_m, q5_k_m) the types of
// gguf_weight_type; norms in F32; for llama3 rope scaling the `rope_freqs.weight` factors.
// Refused (ErrorKind::unsupported, naming what): other architectures than LlamaForCausalLM /
// MistralForCausalLM (`llama`), Qwen2ForCausalLM (`qwen2`, with q/k/v biases), Qwen3ForCausalLM
// (`qwen3`, with q/k norms), Qwen3MoeForCausalLM (`qwen3moe`, with q/k norms and softmax
// routing), DeepseekV3ForCausalLM, Glm4MoeForCausalLM and GlmMoeDsaForCausalLM
// (check_deepseek_gguf); biases or q/k norms where the architecture has none, sliding windows,
// rope scaling other than none / linear / yarn (and llama3 for `llama`; YaRN without mscale /
// attention_factor overrides). Qwen's and GLM's q/k rows are written as stored (llama.cpp permutes
// Llama's only).
#pragma once

#include <functional>

#include "dspark/core/quant.h"
#include "dspark/model/quantize_checkpoint.h"

namespace dspark {

// A GGUF output format: every weight in `base`, or llama.cpp's medium mix of it.
struct GgufFormat {
  QuantType base = QuantType::q8_0;
  bool medium = false;  // q4_k_m, q5_k_m
};

// The block type of a single-type output format name ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
// "q4_k", "q5_k", "q6_k"), or nullopt.
std::optional<QuantType> gguf_format_type(std::string_view format);
// Any output format name: those above, "q4_k_m" and "q5_k_m"; nullopt for others.
std::optional<GgufFormat> gguf_format(std::string_view format);

// What llama-quantize's medium mixes look at besides a weight's name and width.
struct GgufMixModel {
  int n_layers = 0;
  bool tied = false;    // the embedding is the LM head
  int experts = 0;      // routed experts of a MoE layer (0: a dense model)
  bool is_70b = false;  // llama.cpp's 70B type: 80 layers (`llama`: with grouped KV heads)
};

// The type a 2-D weight `hf_name` ([rows, cols], Hugging Face name; an expert's projection
// "model.layers.L.mlp.experts.E.down_proj.weight") is written in, nullopt for F32. A router
// (".mlp.gate.weight") is always F32. A single-type format writes every other weight in its type
// when cols is a multiple of its block. The medium mixes follow llama-quantize's rules: the base
// type (Q4_K / Q5_K) except
//   - the LM head (or the tied embedding): Q6_K;
//   - v_proj and down_proj (the experts' too) in the layers that get more bits (the first and
//     last eighth, every third between): Q6_K; v_proj of a 70B model otherwise Q5_K (for Q4_K);
//   - models of 8 experts: k_proj and v_proj Q8_0, and in q4_k_m o_proj Q5_K;
// and a k-quant weight whose cols are not a multiple of 256 falls back to Q5_0 / Q5_1 / Q8_0 (for
// Q4_K / Q5_K / Q6_K), F32 when not a multiple of 32.
std::optional<QuantType> gguf_weight_type(const GgufFormat& format, std::string_view hf_name,
                                          int64_t cols, const GgufMixModel& model);

// Writes options.output / "model.gguf" from options.input in `format` (options.spec and
// keep_float are not used). The summary counts the tensors as quantize_checkpoint's does.
QuantizeSummary export_gguf(const QuantizeOptions& options, const GgufFormat& format,
                            const std::function<void(const QuantizeProgress&)>& progress);
inline QuantizeSummary export_gguf(const QuantizeOptions& options, QuantType type,
                                   const std::function<void(const QuantizeProgress&)>& progress) {
  return export_gguf(options, GgufFormat{type, false}, progress);
}

}  // namespace dspark
