// `dspark quantize --format q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m|q5_k_m`: a float
// Hugging Face Llama-family checkpoint written as a GGUF file of llama.cpp's `llama`, `qwen2` or
// `qwen3` architecture (what model/gguf_model.h loads), with the writer of io/gguf_writer.h and the
// block quantizers of core/quant_encode.h. See docs/quantization.md.
//
// OUT/model.gguf gets: the `llama.*` hyper-parameters; the tokenizer (gguf_tokenizer_metadata:
// byte-level BPE only); every 2-D weight in the chosen type (q/k rows in llama.cpp's interleaved
// RoPE order), or in F32 when its last dim is not a multiple of the type's block (32 values, 256
// for the k-quants); with a medium mix (q4_k_m, q5_k_m: llama-quantize's rule for dense models)
// the LM head (or the tied embedding) in Q6_K, and v_proj and down_proj in Q6_K in the layers that
// get more bits (the first and last eighth, and every third between), a k-quant weight whose last
// dim is not a multiple of 256 in Q5_0 / Q5_1 / Q8_0 (for Q4_K / Q5_K / Q6_K); norms in F32; for
// llama3 rope
// scaling the `rope_freqs.weight` factors. Refused (ErrorKind::unsupported, naming what): other
// architectures than LlamaForCausalLM / MistralForCausalLM (`llama`), Qwen2ForCausalLM (`qwen2`,
// with q/k/v biases) and Qwen3ForCausalLM (`qwen3`, with q/k norms), biases or q/k norms where the
// architecture has none, sliding windows, rope scaling other than none / linear (and llama3 for
// `llama`). Qwen's q/k rows are written as stored (llama.cpp permutes Llama's only).
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

// The type a 2-D weight `hf_name` ([rows, cols], Hugging Face name) is written in: the format's
// rule above, nullopt for F32 (cols not a multiple of any block the rule allows). n_layers: the
// model's; tied: the embedding is the LM head.
std::optional<QuantType> gguf_weight_type(const GgufFormat& format, std::string_view hf_name,
                                          int64_t cols, int n_layers, bool tied);

// Writes options.output / "model.gguf" from options.input in `format` (options.spec and
// keep_float are not used). The summary counts the tensors as quantize_checkpoint's does.
QuantizeSummary export_gguf(const QuantizeOptions& options, const GgufFormat& format,
                            const std::function<void(const QuantizeProgress&)>& progress);
inline QuantizeSummary export_gguf(const QuantizeOptions& options, QuantType type,
                                   const std::function<void(const QuantizeProgress&)>& progress) {
  return export_gguf(options, GgufFormat{type, false}, progress);
}

}  // namespace dspark
