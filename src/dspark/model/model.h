// The Model interface: forward a batch of rows (each its own sequence in a paged KV cache, with
// its own positions) and return logits only for the positions asked for, plus hidden-state taps.
// Families register by their Hugging Face `architectures` string (model/registry.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/config.h"

namespace dspark {

class WeightSource;

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
  // Also the argmax of every logits row (greedy verification), copied to the host by the forward
  // itself (on CUDA inside its graph: no launches after it): ForwardOutput::argmax.
  bool want_argmax = false;
  // When defined: [n_tokens, hidden] (any float dtype, on the model's device, rows contiguous),
  // the input of the first decoder layer instead of the tokens' embeddings (an MTP layer's
  // projected input, model/mtp.h). The tokens are still checked; such a forward never runs as a
  // CUDA graph.
  Tensor input_embeddings;
};

struct ForwardOutput {
  // All on the model's device, valid until the next forward on the same model.
  Tensor logits;             // f32 [logit_indices.size(), vocab]
  std::vector<Tensor> taps;  // one per tap_layers entry: [n_tokens, hidden] activation dtype
  Tensor final_hidden;       // [n_tokens, hidden] when asked for
  // With want_argmax: i32 [logit_indices.size()] in host memory (pinned on CUDA), the argmax of
  // each logits row (lowest index on ties), written by the forward's own copy: valid once the
  // context has synchronised, until the next forward. Null when not asked for or not provided.
  const int32_t* argmax = nullptr;
};

// Host-side counters of Model::forward (for benchmarks: the CPU cost of enqueueing a step).
struct ForwardStats {
  static constexpr int64_t kStepTokens = 256;  // "step" forwards: at most this many tokens
  int64_t forwards = 0;                        // forward() calls
  int64_t graph_replays = 0;                   // of them, run by launching a captured CUDA graph
  int64_t graph_captures = 0;   // CUDA graphs captured (each launched at once: a replay too)
  int64_t graph_fallbacks = 0;  // captures that failed (the forward then ran eagerly)
  double host_ms = 0;           // host time from entering forward() to the end of enqueueing
  // The same for decode / verify-sized forwards only (prefill chunks are larger).
  int64_t step_forwards = 0;
  double step_host_ms = 0;
  // Of those, the ones replayed from a CUDA graph: their host time, and within it the metadata
  // staging (pinned copy, fence) and the graph launch (bench_round reports them per replay).
  int64_t step_replays = 0;
  double step_replay_host_ms = 0, step_stage_ms = 0, step_launch_ms = 0;
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
  // (the embedding table when tied), as stored (dense in the engine dtype, or block-quantized:
  // gather_rows and linear take either), and the final norm weight [hidden].
  virtual WeightMatrix embedding_table() const = 0;
  virtual WeightMatrix lm_head() const = 0;
  virtual Tensor final_norm() const = 0;

  // CUDA-graph capture and replay of small fixed-shape forwards (decode / verify steps; the graph
  // buckets of backend/graph_cache.h). Off unless enabled here or by the environment
  // (DSPARK_CUDA_GRAPHS=1); results are bitwise those of the eager forward. Models without support
  // ignore it.
  virtual void set_cuda_graphs(bool enabled) { (void)enabled; }
  virtual bool cuda_graphs() const { return false; }
  virtual ForwardStats forward_stats() const { return {}; }
  virtual void reset_forward_stats() {}
  // Bytes of the routed experts' weights of the MoE layers (0 for dense models): a token reads
  // only its chosen experts' share of them, which benchmarks count instead of all of them.
  virtual int64_t routed_expert_bytes() const { return 0; }
};

// Loads a Hugging Face checkpoint directory (config.json + safetensors). `dtype` is the engine
// dtype for weights and activations (CPU: f32; CUDA: bf16 by default).
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Device device, DType dtype);

// Calls fn with the weights of the checkpoint at `path` as load_model reads them: a safetensors
// directory (MLX affine-quantized and block-scaled FP8 checkpoints through their adapters), or a
// GGUF file (GgufWeights: Hugging Face names, quantized blocks as stored); the weights live until
// fn returns. For loaders of a checkpoint's other parts (model/mtp.h).
void with_checkpoint_weights(const std::filesystem::path& path,
                             const std::function<void(const WeightSource&)>& fn);

}  // namespace dspark
