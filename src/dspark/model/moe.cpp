#include "dspark/model/moe.h"

#include <fmt/format.h>

#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/moe.h"
#include "dspark/ops/norm.h"

namespace dspark {

namespace {

// Stacks the named [rows, cols] matrices (`rows` each, expert by expert) into one ExpertMatrix:
// one block matrix when they share a block format and moe_linear can take its experts apart (rows
// interleaved by 8 only split at an expert's first row when an expert has a multiple of 8 rows),
// else dense. `blocks_only`: undefined instead of dense when the blocks do not stack.
ExpertMatrix load_stacked(const WeightLoader& w, const std::vector<std::string>& names,
                          int64_t rows, int64_t cols, int64_t expert_rows, bool blocks_only) {
  std::vector<WeightLoader::Part> parts;
  parts.reserve(names.size());
  for (const std::string& name : names) parts.push_back({name, Shape{rows, cols}});
  ExpertMatrix m;
  m.blocks = w.load_quantized(parts);
  const bool split_ok =
      m.blocks.parts.size() == 1 &&
      (m.blocks.parts[0].w.format != WeightFormat::blocks_x8 || expert_rows % 8 == 0);
  if (!split_ok) {
    const bool was_blocks = m.blocks.defined();
    m.blocks = {};
    if (blocks_only && was_blocks) return m;
    m.dense = w.load_concat(parts);
  }
  return m;
}

// Every expert's `proj` ("gate_proj", "up_proj" or "down_proj") of shape [rows, cols], stacked.
ExpertMatrix load_experts(const WeightLoader& w, const std::string& prefix, int experts,
                          const char* proj, int64_t rows, int64_t cols) {
  std::vector<std::string> names;
  for (int e = 0; e < experts; ++e)
    names.push_back(fmt::format("{}experts.{}.{}.weight", prefix, e, proj));
  return load_stacked(w, names, rows, cols, rows, false);
}

}  // namespace

MoeWeights load_moe_weights(const WeightLoader& w, const std::string& prefix,
                            const ModelConfig& c) {
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  MoeWeights m;
  m.top_k = c.num_experts_per_tok;
  m.normalize = c.norm_topk_prob;
  m.router = w.load(prefix + "gate.weight", Shape{c.num_experts, h});
  if (c.moe_sigmoid_routing) {
    m.correction_bias =
        w.load(prefix + "gate.e_score_correction_bias", Shape{c.num_experts}, DType::f32);
    m.grouped = MoeGroupRouting{c.n_group, c.topk_group, c.norm_topk_prob,
                                static_cast<float>(c.routed_scaling_factor)};
  }
  if (c.n_shared_experts > 0) {
    const int64_t shared = int64_t{c.n_shared_experts} * inter;
    load_mlp_weights(w, prefix + "shared_experts.", h, shared, m.shared);
  }
  m.experts = c.num_experts;
  std::vector<std::string> gate_up;
  for (int e = 0; e < c.num_experts; ++e) {
    gate_up.push_back(fmt::format("{}experts.{}.gate_proj.weight", prefix, e));
    gate_up.push_back(fmt::format("{}experts.{}.up_proj.weight", prefix, e));
  }
  m.gate_up = load_stacked(w, gate_up, inter, h, 2 * inter, true);
  if (!m.gate_up.defined()) {
    m.gate = load_experts(w, prefix, c.num_experts, "gate_proj", inter, h);
    m.up = load_experts(w, prefix, c.num_experts, "up_proj", inter, h);
  }
  m.down = load_experts(w, prefix, c.num_experts, "down_proj", h, inter);
  return m;
}

bool moe_on_device(const Context& ctx, const MoeWeights& w, DType x, int64_t n) {
  const int64_t m = n * w.top_k;
  const bool gate_up = w.gate_up.defined() ? moe_linear_on_device(ctx, w.gate_up.matrix(), x, m)
                                           : moe_linear_on_device(ctx, w.gate.matrix(), x, m) &&
                                                 moe_linear_on_device(ctx, w.up.matrix(), x, m);
  return gate_up && moe_linear_on_device(ctx, w.down.matrix(), x, m);
}

void moe_block(Context& ctx, const MoeWeights& w, const Tensor& xn, const MoeScratch& s,
               const Tensor& out, const ResidualNorm* then) {
  const int64_t inter = s.act.size(1);
  linear(ctx, xn, w.router.view(), Tensor{}, s.router_logits);
  if (w.correction_bias->defined()) {
    moe_route_grouped_and_group(ctx, s.router_logits, w.correction_bias.view(), w.grouped, s.ids,
                                s.weights, s.groups);
  } else {
    moe_route_and_group(ctx, s.router_logits, w.normalize, s.ids, s.weights, s.groups);
  }
  if (w.gate_up.defined()) {
    moe_linear_gather(ctx, xn, s.rows, w.gate_up.matrix(), s.groups, s.gate_up);
  } else {
    gather_rows(ctx, xn, s.groups.order, s.rows);
    moe_linear(ctx, s.rows, w.gate.matrix(), s.groups, s.gate_up.slice(1, 0, inter));
    moe_linear(ctx, s.rows, w.up.matrix(), s.groups, s.gate_up.slice(1, inter, 2 * inter));
  }
  moe_linear_swiglu(ctx, s.gate_up, s.act, w.down.matrix(), s.groups, s.expert_out);
  moe_combine(ctx, s.expert_out, s.groups.slots, s.weights, out);
  if (w.has_shared()) {
    mlp_block(ctx, w.shared, xn, s.shared_gate_up, s.shared_act, s.shared_out);
    add(ctx, out, s.shared_out, out);
  }
  if (then == nullptr) return;
  add_rms_norm(ctx, then->residual, out, then->weight, then->out, then->params);
  if (then->tap.defined()) convert(ctx, then->residual, then->tap);
}

}  // namespace dspark
