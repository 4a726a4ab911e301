// The Model interface: forward a batch of rows (each its own sequence in a paged KV cache, with
// its own positions) and return logits only for the positions asked for, plus hidden-state taps.
// Families register by their Hugging Face `architectures` string (model/registry.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/config.h"

namespace dspark {

// Tap index convention (same as DFlash/DSpark `target_layer_ids`): tap l >= 0 is the OUTPUT of
// decoder layer l (HF hidden_states[l + 1]); tap -1 is the embedding output (hidden_states[0]).
inline constexpr int kTapEmbedding = -1;

struct ForwardBatch {
  // Rows: tokens of row r are tokens[row_indptr[r] .. row_indptr[r+1]); each row appends to its
  // sequence, so the positions of row r are length(seq) .. length(seq) + n_r - 1.
  std::vector<int32_t> tokens;
  std::vector<int32_t> row_indptr;  // [n_rows + 1]
  std::vector<SeqId> seqs;          // [n_rows]
  // Indices into `tokens` whose logits are wanted (e.g. the last token of each row).
  std::vector<int32_t> logit_indices;
  // Layers whose outputs are wanted for every token (see kTapEmbedding).
  std::vector<int> tap_layers;
  bool want_final_hidden = false;  // hidden states after the final norm, every token
};

struct ForwardOutput {
  // All on the model's device, valid until the next forward on the same model.
  Tensor logits;              // f32 [logit_indices.size(), vocab]
  std::vector<Tensor> taps;   // one per tap_layers entry: [n_tokens, hidden] activation dtype
  Tensor final_hidden;        // [n_tokens, hidden] when asked for
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual Device device() const = 0;
  virtual DType activation_dtype() const = 0;
  // The KV cache layout this model needs (num_pages left for the caller to choose).
  virtual KvCacheShape kv_shape(int page_size, int num_pages) const = 0;

  // Runs the batch. Throws invalid_input for bad tokens / unknown sequences, and out_of_memory
  // (leaving the cache unchanged) when the cache cannot hold the new tokens: callers that must not
  // fail check free pages first.
  virtual ForwardOutput forward(Context& ctx, PagedKvCache& kv, const ForwardBatch& batch) = 0;

  // Weights that drafters share with their target: [vocab, hidden] embedding table, LM head
  // (the embedding table when tied), final norm weight [hidden].
  virtual Tensor embedding_table() const = 0;
  virtual Tensor lm_head() const = 0;
  virtual Tensor final_norm() const = 0;
};

// Loads a Hugging Face checkpoint directory (config.json + safetensors). `dtype` is the engine
// dtype for weights and activations (CPU: f32; CUDA: bf16 by default).
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Device device, DType dtype);

}  // namespace dspark
