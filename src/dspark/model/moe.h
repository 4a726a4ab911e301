// The mixture-of-experts FFN of a decoder layer: a router (Qwen3-MoE: softmax over the experts,
// top-k, optional renormalisation; DeepSeek-V3: sigmoid scores with a selection bias, group-limited
// top-k, routed scaling; ops/moe.h), one SwiGLU MLP per expert, and DeepSeek's shared expert. Each
// expert's weights are their own matrices, so a token reads only its chosen experts; the rows of a
// batch are grouped by expert and each expert runs once over its rows.
#pragma once

#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/core/tensor.h"
#include "dspark/model/config.h"
#include "dspark/model/layers.h"

namespace dspark {

struct MoeWeights {
  OwnedTensor router;               // [experts, hidden] engine dtype (mlp.gate.weight)
  std::vector<MlpWeights> experts;  // [experts]: gate_up [2 * moe_inter, hidden], down
  int top_k = 0;
  bool normalize = false;  // norm_topk_prob
  // DeepSeek routing (config.moe_sigmoid_routing) when defined: f32 [experts]
  // (mlp.gate.e_score_correction_bias), with the groups and scaling in `grouped`.
  OwnedTensor correction_bias;
  MoeGroupRouting grouped;
  MlpWeights shared;  // mlp.shared_experts, run on every token (config.n_shared_experts > 0)
  bool defined() const { return !experts.empty(); }
  bool has_shared() const { return shared.gate_up->defined() || shared.gate_up_q.defined(); }
};

// Loads `prefix` + "gate.weight" and "experts.E.{gate,up,down}_proj.weight" for E < num_experts
// (prefix e.g. "model.layers.3.mlp."); with DeepSeek routing also "gate.e_score_correction_bias"
// and "shared_experts.{gate,up,down}_proj.weight". A missing or mis-shaped tensor throws
// ErrorKind::io naming it (WeightLoader).
MoeWeights load_moe_weights(const WeightLoader& w, const std::string& prefix,
                            const ModelConfig& config);

// Scratch of moe_block for n tokens (from the forward's arena), and the host side of the grouping.
struct MoeScratch {
  Tensor router_logits;              // f32 [n, experts]
  Tensor ids;                        // i32 [n, k]
  Tensor weights;                    // f32 [n, k]
  Tensor rows;                       // [n * k, hidden] activation dtype: xn rows grouped by expert
  Tensor gate_up;                    // [n * k, 2 * moe_inter]
  Tensor act;                        // [n * k, moe_inter]
  Tensor expert_out;                 // [n * k, hidden]
  Tensor shared_gate_up;             // [n, 2 * shared_inter] (shared expert only)
  Tensor shared_act;                 // [n, shared_inter]
  Tensor shared_out;                 // [n, hidden] f32
  PackedIndices* indices = nullptr;  // the grouping's upload (owned by the model)
};

// out[n, hidden] (f32 or the activation dtype) = sum over each token's k chosen experts of
// weight * expert(xn) (+ shared(xn)) for the normalised input xn [n, hidden]; then `then`
// (optional: residual add, norm and tap as in mlp_block). The grouping is decided on the host from
// the router's choices, so on CUDA this waits for the router (a MoE forward cannot be captured in a
// graph).
void moe_block(Context& ctx, const MoeWeights& w, const Tensor& xn, const MoeScratch& scratch,
               const Tensor& out, const ResidualNorm* then = nullptr);

}  // namespace dspark
