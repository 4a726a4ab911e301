// Block drafter weights on the engine device, fused at load like the target's layers: per layer
// q/k/v in one [q + 2 kv, d] matrix (the context projection uses its k/v rows) and gate/up in one
// [2I, d] matrix. Norm weights and biases are f32; matrices are in the engine dtype.
//
// Checkpoint tensor names (DeepSpec / SpecForge / z-lab; a leading "model." is accepted, and
// SpecForge's early "logit_head." prefix for the heads):
//   fc.weight [d, m*H]   hidden_norm.weight [d]   norm.weight [d]
//   layers.{i}.{input_layernorm,post_attention_layernorm}.weight [d]
//   layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ .bias with attention_bias), {q,k}_norm.weight
//   layers.{i}.mlp.{gate,up,down}_proj.weight
//   embed_tokens.weight [V, d], lm_head.weight [V, d]          optional (else the target's)
//   markov_head.markov_w1.weight [V, r], markov_head.markov_w2.weight [V, r]
//   markov_head.gate_proj.{weight [r, d+r], bias [r]}          gated head
//   markov_head.joint_proj.{weight [3r, 2r+d], bias [3r]}      RNN head
//   confidence_head.proj.{weight [1, d (+r)], bias [1]}
//
// An MLX affine-quantized checkpoint (`dspark quantize`'s drafter policy, docs/quantization.md)
// loads through MlxWeights: fc, projections, embed_tokens and lm_head stay blocks (the MLX block
// types of io/mlx_quant.h, mlx_block_type: Q4_1 / Q8_A for groups of 32, one block per group of 64
// or 128 on the CPU; the `*_q` / TableWeight fields; linear and gather_rows take them); the Markov
// and confidence heads' matrices (read by kernels that take dense weights) are dequantized at load
// into the engine dtype.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "dspark/core/buffer.h"
#include "dspark/model/layers.h"
#include "dspark/spec/dspark/drafter_config.h"

namespace dspark {

class SafeTensors;
class WeightSource;

// A drafter directory's tensors: its safetensors, through MlxWeights when config.json carries an
// MLX quantization.
class DrafterCheckpoint {
 public:
  static DrafterCheckpoint open(const std::filesystem::path& dir);
  DrafterCheckpoint(DrafterCheckpoint&&) noexcept;
  ~DrafterCheckpoint();
  const WeightSource& weights() const { return *source_; }

 private:
  DrafterCheckpoint() = default;
  std::unique_ptr<SafeTensors> st_;
  std::unique_ptr<WeightSource> source_;
};

struct DrafterLayerWeights {
  OwnedTensor norm_in;    // [d] f32
  OwnedTensor norm_post;  // [d] f32
  AttentionWeights attn;  // fused qkv [q + 2kv, d], q/k norms, o
  MlpWeights mlp;         // fused gate_up [2I, d], down [d, I]
};

struct DrafterWeights {
  OwnedTensor fc;           // [d, m * H_target], empty when fc_q holds it
  OwnedTensor fc_scale;     // [d] f32 once fc holds E4M3 codes (FP8 drafting), else empty
  QuantizedWeight fc_q;     // block-quantized fc, when defined
  OwnedTensor hidden_norm;  // [d] f32
  std::vector<DrafterLayerWeights> layers;
  OwnedTensor norm;     // [d] f32
  TableWeight embed;    // [V, d] or empty (the target's embedding is used)
  TableWeight lm_head;  // [V, d] or empty (the target's LM head is used)
  // The Markov tables: blocks as stored on the CPU (gather_rows and linear take them), dense in
  // the engine dtype on CUDA, whose fused greedy Markov kernels (ops/head_cells.h) read float rows.
  TableWeight markov_w1;         // [V, r]
  TableWeight markov_w2;         // [V, r] (a Linear r -> V)
  OwnedTensor markov_proj;       // gated [r, d + r] / RNN [3r, 2r + d], or empty
  OwnedTensor markov_proj_bias;  // [r] / [3r] f32, or empty
  OwnedTensor confidence_w;      // [1, d (+ r)], or empty
  OwnedTensor confidence_b;      // [1] f32
};

// What a checkpoint carries besides the backbone (answered before loading, for the fit checks).
struct DrafterCheckpointInfo {
  bool has_embedding = false;
  bool has_lm_head = false;
  int64_t fc_in_features = 0;  // fc.weight's second dim (m * H of the target it was trained on)
};
DrafterCheckpointInfo inspect_drafter_checkpoint(const WeightSource& w);

// Loads and checks every tensor against the config (ErrorKind::io naming the tensor and shapes).
// `target_hidden`: H, the width of each target tap.
DrafterWeights load_drafter_weights(const WeightSource& w, const DrafterConfig& config,
                                    int target_hidden, Device device, DType dtype);

}  // namespace dspark
