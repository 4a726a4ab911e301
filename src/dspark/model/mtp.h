// The next-token prediction (MTP) layer a DeepSeek-V3, GLM-4.5 or GLM-5 checkpoint carries beside
// its decoder (config num_nextn_predict_layers > 0; dspark uses the first, checkpoint layer index
// num_hidden_layers, under "model.layers.{N}."; in a GGUF file blk.{N}.nextn.* and the block's
// own tensors). One row of it, at sequence position i:
//
//   x  = eh_proj([enorm(embed(t_{i+1})), hnorm(h_i)])     eh_proj: [hidden, 2 * hidden]
//   x' = the family's decoder layer (attention over the layer's own KV cache, dense or MoE FFN)
//   h' = shared_head.norm(x');  logits = shared_head.head(h')    (predicting t_{i+2})
//
// h_i is the target's hidden state at position i after its final norm (the vector its LM head
// reads); a chained step feeds the previous step's h' instead. embed_tokens and shared_head.head
// are the layer's own copies when the checkpoint has them, else the target's (tied as the target
// is). The layer is held as a one-layer model of the target's family whose input embeddings are
// replaced by x (ForwardBatch::input_embeddings). A GLM-5 (DSA) layer is a full indexer layer: its
// indexer scores the layer's own cached index keys (written beside its MLA latents, so rolled back
// with them) and its attention reads the index_topk best.
#pragma once

#include <memory>

#include "dspark/model/layers.h"
#include "dspark/model/model.h"

namespace dspark {

class MtpLayer {
 public:
  // Loads the first MTP layer of the target whose config this is, from its checkpoint_path: a
  // safetensors checkpoint, or a GGUF file whose block num_layers holds the layer as llama.cpp's
  // "nextn" tensors (blk.N.nextn.{eh_proj,enorm,hnorm,shared_head_norm} and the optional
  // nextn.{embed_tokens,shared_head_head}, beside the block's attn_* / ffn_*), quantized blocks
  // kept as the target's are. Throws invalid_input when the target has none
  // (num_nextn_predict_layers 0, a checkpoint or file saved without the layer's tensors), io for
  // malformed tensors.
  static std::unique_ptr<MtpLayer> load(const ModelConfig& target, Device device, DType dtype);

  const Model& block() const { return *block_; }
  int hidden_size() const { return block_->config().hidden_size; }
  int vocab_size() const { return block_->config().vocab_size; }
  Device device() const { return block_->device(); }
  DType activation_dtype() const { return block_->activation_dtype(); }
  KvCacheShape kv_shape(int page_size, int num_pages) const {
    return block_->kv_shape(page_size, num_pages);
  }

  // Rows as in Model::forward, with batch.tokens the next tokens t_{i+1} and `hidden`
  // [n_tokens, hidden] (any float dtype, on the layer's device) the h_i of each row. Returns the
  // logits of batch.logit_indices and final_hidden (h' of every row, activation dtype), valid until
  // the next forward. Sets batch.input_embeddings and want_final_hidden.
  ForwardOutput forward(Context& ctx, PagedKvCache& kv, ForwardBatch& batch, const Tensor& hidden);

 private:
  std::unique_ptr<Model> block_;
  OwnedTensor enorm_, hnorm_;  // [hidden] f32
  OwnedTensor eh_proj_;        // [hidden, 2 * hidden] engine dtype, unless eh_proj_q_ holds it
  QuantizedWeight eh_proj_q_;  // block-quantized as stored (load_matrix)
  float eps_ = 1e-6f;
  PackedIndices ids_;      // the tokens, on the device
  ActivationArena arena_;  // embed rows, [enorm(embed), hnorm(h)], x
};

}  // namespace dspark
