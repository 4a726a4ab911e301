// `dspark quantize --format q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q6_k`: a float Hugging Face Llama-family
// checkpoint written as a GGUF file of llama.cpp's `llama` architecture (what model/gguf_model.h
// loads), with the writer of io/gguf_writer.h and the block quantizers of core/quant_encode.h. See
// docs/quantization.md.
//
// OUT/model.gguf gets: the `llama.*` hyper-parameters; the tokenizer (gguf_tokenizer_metadata:
// byte-level BPE only); every 2-D weight in the chosen type (q/k rows in llama.cpp's interleaved
// RoPE order), or in F32 when its last dim is not a multiple of the type's block (32 values, 256
// for the k-quants); norms in F32; for llama3 rope
// scaling the `rope_freqs.weight` factors. Refused (ErrorKind::unsupported, naming what): other
// architectures than LlamaForCausalLM / MistralForCausalLM, q/k/v biases, q/k norms, sliding
// windows, rope scaling other than none / linear / llama3.
#pragma once

#include <functional>

#include "dspark/core/quant.h"
#include "dspark/model/quantize_checkpoint.h"

namespace dspark {

// The block type of an output format name ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
// "q6_k"), or nullopt.
std::optional<QuantType> gguf_format_type(std::string_view format);

// Writes options.output / "model.gguf" from options.input in `type` (options.spec and
// keep_float are not used). The summary counts the tensors as quantize_checkpoint's does.
QuantizeSummary export_gguf(const QuantizeOptions& options, QuantType type,
                            const std::function<void(const QuantizeProgress&)>& progress);

}  // namespace dspark
