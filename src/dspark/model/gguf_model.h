// Models from GGUF files: llama.cpp's `llama`, `qwen2`, `qwen3`, `qwen3moe`, `deepseek2`,
// `glm4moe` and `glm-dsa` architectures mapped onto our Llama family (hyper-parameters from
// `<arch>.*` metadata, tensors renamed to the Hugging Face names, each expert of a stacked
// `ffn_*_exps` tensor seen as its own Hugging Face matrix, block-quantized 2-D weights kept in
// their format on every device, other quantized tensors dequantized at load to the engine dtype).
// See docs/gguf.md and docs/quantization.md.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dspark/core/device.h"
#include "dspark/core/dtype.h"
#include "dspark/io/gguf.h"
#include "dspark/model/config.h"
#include "dspark/model/model.h"
#include "dspark/model/weight_source.h"

namespace dspark {

// The GGUF file `path` names: a .gguf file, or a directory holding no config.json and exactly one
// .gguf file (several: ErrorKind::io listing them). nullopt when `path` is neither (e.g. a Hugging
// Face checkpoint directory).
std::optional<std::filesystem::path> resolve_gguf_model(const std::filesystem::path& path);

// The hyper-parameters of a GGUF model (`general.architecture` "llama" -> LlamaForCausalLM,
// "qwen3moe" -> Qwen3MoeForCausalLM: a layer has experts when it has `ffn_gate_inp`; the top-k
// weights are renormalised unless `qwen3moe.expert_weights_norm` is false, as llama.cpp does;
// "glm-dsa" -> GlmMoeDsaForCausalLM: deepseek2's MLA and DeepSeek MoE plus the DSA indexer keys
// `attention.indexer.*`, docs/gguf.md).
// Throws ErrorKind::unsupported for another architecture or rope scaling type, ErrorKind::io for
// missing or inconsistent keys (naming the file and the key).
ModelConfig gguf_model_config(const GgufFile& file);

// The tensors of a GGUF file under their Hugging Face names, dequantized to f32 on first use (and
// kept until the source is destroyed). For Llama, q/k projection rows are put back from
// llama.cpp's interleaved RoPE order into the Hugging Face (rotate-half) order. Expert E of
// `blk.N.ffn_{gate,up,down}_exps.weight` ([experts, rows, cols]) is
// `model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight`: a view of its rows (its blocks as
// stored, when quantized).
class GgufWeights final : public WeightSource {
 public:
  GgufWeights(const GgufFile& file, const ModelConfig& config);
  bool contains(const std::string& name) const override;
  Tensor get(const std::string& name) const override;
  std::string origin() const override { return file_.path().string(); }
  // Block-quantized 2-D tensors as stored (the mapping's bytes; q/k projection rows reordered
  // into a copy kept until the source is destroyed).
  std::optional<QuantizedView> get_quantized(const std::string& name) const override;
  // The GGUF tensor name behind a Hugging Face name ("" when none; an expert's matrix: the stacked
  // tensor holding it).
  std::string gguf_name(const std::string& hf_name) const;
  Shape shape_of(const std::string& name) const override;
  // An expert's matrix: its share of the stacked tensor.
  int64_t stored_bytes(const std::string& name) const override;
  int64_t total_stored_bytes() const override;

 private:
  // One expert's matrix inside a stacked [experts, rows, cols] GGUF tensor.
  struct ExpertSlice {
    std::string gguf;
    int64_t expert = 0;
  };
  const ExpertSlice* expert_slice(const std::string& hf_name) const;
  // The whole GGUF tensor `gguf` dequantized (cached).
  const std::vector<float>& dequantized(const std::string& gguf) const;

  const GgufFile& file_;
  bool permuted_qk_ = false;  // llama: q/k rows in llama.cpp's interleaved RoPE order
  std::map<std::string, ExpertSlice> experts_;
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
  std::map<std::string, std::string> hf_to_gguf_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::vector<float>> cache_;
  mutable std::map<std::string, std::vector<uint8_t>> block_cache_;
};

// llama.cpp's converter reorders the rows of each head of Wq / Wk from the Hugging Face layout
// [half 0 | half 1] to interleaved pairs (r0 of half 0, r0 of half 1, r1 of half 0, ...). This
// undoes it in place on a row-major [n_heads * head_dim, cols] matrix (cols = 1 for a bias); the
// rows of a block-quantized matrix are moved the same way, `row_bytes` bytes each.
void unpermute_gguf_qk_rows(std::vector<float>& w, int n_heads, int64_t rows, int64_t cols);
// The converter's order from the Hugging Face one (the inverse of unpermute_gguf_qk_rows).
void permute_gguf_qk_rows(std::vector<float>& w, int n_heads, int64_t rows, int64_t cols);

// The GGUF name of a Hugging Face tensor name of the Llama family ("model.layers.3.mlp.up_proj.
// weight" -> "blk.3.ffn_up.weight", "lm_head.weight" -> "output.weight"); nullopt for a name the
// GGUF `llama` architecture has no tensor for.
std::optional<std::string> gguf_name_of(const std::string& hf_name);
void unpermute_gguf_qk_block_rows(std::vector<uint8_t>& w, int n_heads, int64_t rows,
                                  int64_t row_bytes);

// Loads a GGUF model file (config, weights) onto `device` in `dtype`.
std::unique_ptr<Model> load_gguf_model(const GgufFile& file, Device device, DType dtype);

// EOS ids of a GGUF file: tokenizer.ggml.eos_token_id, plus eot/eom ids when present.
std::vector<int> gguf_eos_token_ids(const GgufFile& file);

}  // namespace dspark
