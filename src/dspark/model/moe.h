// The mixture-of-experts FFN of a decoder layer: a router (Qwen3-MoE: softmax over the experts,
// top-k, optional renormalisation; DeepSeek-V3: sigmoid scores with a selection bias, group-limited
// top-k, routed scaling; ops/moe.h), one SwiGLU MLP per expert, and DeepSeek's shared expert. The
// experts' matrices of each projection are stacked into one weight, of which a token reads only
// its chosen experts' rows; the rows of a batch are grouped by expert on the device (moe_group)
// and each expert runs once over its rows (moe_linear).
#pragma once

#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/core/tensor.h"
#include "dspark/model/config.h"
#include "dspark/model/layers.h"
#include "dspark/ops/moe.h"

namespace dspark {

// One projection of every expert, stacked along the rows: expert e's matrix is rows
// [e * rows, (e + 1) * rows). Dense in the engine dtype, or block-quantized as stored.
struct ExpertMatrix {
  OwnedTensor dense;
  QuantizedWeight blocks;  // one part when defined
  WeightMatrix matrix() const {
    return blocks.defined() ? blocks.parts[0].w : WeightMatrix::dense(dense.view());
  }
  bool defined() const { return blocks.defined() || dense->defined(); }
  int64_t bytes() const {
    return blocks.defined()   ? blocks.bytes()
           : dense->defined() ? static_cast<int64_t>(dense->nbytes())
                              : 0;
  }
};

struct MoeWeights {
  OwnedTensor router;  // [experts, hidden] engine dtype (mlp.gate.weight)
  int experts = 0;
  // [experts * 2 * moe_inter, hidden]: expert e's gate rows, then its up rows, so one product
  // gives both halves of a row's SwiGLU input.
  ExpertMatrix gate_up;
  ExpertMatrix gate, up;  // [experts * moe_inter, hidden], only where gate_up could not stack them
  ExpertMatrix down;      // [experts * hidden, moe_inter]
  int top_k = 0;
  bool normalize = false;  // norm_topk_prob
  // DeepSeek routing (config.moe_sigmoid_routing) when defined: f32 [experts]
  // (mlp.gate.e_score_correction_bias), with the groups and scaling in `grouped`.
  OwnedTensor correction_bias;
  MoeGroupRouting grouped;
  MlpWeights shared;  // mlp.shared_experts, run on every token (config.n_shared_experts > 0)
  bool defined() const { return experts > 0; }
  // The routed experts' bytes (gate, up and down; not the router or the shared expert).
  int64_t expert_bytes() const {
    return gate_up.bytes() + gate.bytes() + up.bytes() + down.bytes();
  }
  bool has_shared() const { return shared.gate_up->defined() || shared.gate_up_q.defined(); }
};

// Loads `prefix` + "gate.weight" and "experts.E.{gate,up,down}_proj.weight" for E < num_experts
// (prefix e.g. "model.layers.3.mlp."); with DeepSeek routing also "gate.e_score_correction_bias"
// and "shared_experts.{gate,up,down}_proj.weight". A missing or mis-shaped tensor throws
// ErrorKind::io naming it (WeightLoader). A projection stays block-quantized when every expert's
// matrix is stored in one block format, else it loads dense; the gate and up projections stack
// into gate_up unless they are stored in different block formats (then each on its own).
MoeWeights load_moe_weights(const WeightLoader& w, const std::string& prefix,
                            const ModelConfig& config);

// Scratch of moe_block for n tokens (from the forward's arena).
struct MoeScratch {
  Tensor router_logits;   // f32 [n, experts]
  Tensor ids;             // i32 [n, k]
  Tensor weights;         // f32 [n, k]
  MoeGroups groups;       // offsets, active [experts + 1], order [n * k], slots [n, k]
  Tensor rows;            // [n * k, hidden] activation dtype: xn rows grouped by expert
  Tensor gate_up;         // [n * k, 2 * moe_inter]
  Tensor act;             // [n * k, moe_inter]
  Tensor expert_out;      // [n * k, hidden]
  Tensor shared_gate_up;  // [n, 2 * shared_inter] (shared expert only)
  Tensor shared_act;      // [n, shared_inter]
  Tensor shared_out;      // [n, hidden] f32
};

// out[n, hidden] (f32 or the activation dtype) = sum over each token's k chosen experts of
// weight * expert(xn) (+ shared(xn)) for the normalised input xn [n, hidden]; then `then`
// (optional: residual add, norm and tap as in mlp_block). Runs without waiting for the host when
// moe_on_device(ctx, w, ...) (so a CUDA graph can capture it).
void moe_block(Context& ctx, const MoeWeights& w, const Tensor& xn, const MoeScratch& scratch,
               const Tensor& out, const ResidualNorm* then = nullptr);

// Whether moe_block of n tokens of activation dtype `x` on ctx runs without a host round trip
// (ops/moe.h, moe_linear_on_device).
bool moe_on_device(const Context& ctx, const MoeWeights& w, DType x, int64_t n);

}  // namespace dspark
