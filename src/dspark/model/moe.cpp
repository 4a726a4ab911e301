#include "dspark/model/moe.h"

#include <fmt/format.h>

#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/moe.h"
#include "dspark/ops/norm.h"

namespace dspark {

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
  m.experts.resize(static_cast<size_t>(c.num_experts));
  for (int e = 0; e < c.num_experts; ++e) {
    const std::string p = fmt::format("{}experts.{}.", prefix, e);
    load_mlp_weights(w, p, h, inter, m.experts[static_cast<size_t>(e)]);
  }
  return m;
}

void moe_block(Context& ctx, const MoeWeights& w, const Tensor& xn, const MoeScratch& s,
               const Tensor& out, const ResidualNorm* then) {
  const int64_t n = xn.size(0), k = w.top_k, experts = static_cast<int64_t>(w.experts.size());
  linear(ctx, xn, w.router.view(), Tensor{}, s.router_logits);
  if (w.correction_bias->defined()) {
    moe_route_grouped(ctx, s.router_logits, w.correction_bias.view(), w.grouped, s.ids, s.weights);
  } else {
    moe_route(ctx, s.router_logits, w.normalize, s.ids, s.weights);
  }

  // Group the (token, choice) pairs by expert on the host: expert e's rows are
  // [offset[e], offset[e + 1]) of the grouped buffers, tokens in increasing order.
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  ctx.copy_async(ids.data(), s.ids.data(), ids.size() * sizeof(int32_t));
  ctx.synchronize();
  std::vector<int64_t> offset(static_cast<size_t>(experts) + 1, 0);
  for (int32_t e : ids) ++offset[static_cast<size_t>(e) + 1];
  for (int64_t e = 0; e < experts; ++e)
    offset[static_cast<size_t>(e) + 1] += offset[static_cast<size_t>(e)];
  std::vector<int32_t> order(ids.size()), slots(ids.size());
  std::vector<int64_t> next(offset.begin(), offset.end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t at = next[static_cast<size_t>(ids[i])]++;
    order[static_cast<size_t>(at)] = static_cast<int32_t>(i / static_cast<size_t>(k));
    slots[i] = static_cast<int32_t>(at);
  }
  PackedIndices& packed = *s.indices;
  packed.clear();
  const int s_order = packed.add(order);
  const int s_slots = packed.add(slots);
  packed.upload(ctx);

  gather_rows(ctx, xn, packed.view(s_order), s.rows);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t lo = offset[static_cast<size_t>(e)], hi = offset[static_cast<size_t>(e) + 1];
    if (lo == hi) continue;
    mlp_block(ctx, w.experts[static_cast<size_t>(e)], s.rows.rows(lo, hi), s.gate_up.rows(lo, hi),
              s.act.rows(lo, hi), s.expert_out.rows(lo, hi));
  }
  moe_combine(ctx, s.expert_out, packed.view(s_slots).reshape(Shape{n, k}), s.weights, out);
  if (w.has_shared()) {
    mlp_block(ctx, w.shared, xn, s.shared_gate_up, s.shared_act, s.shared_out);
    add(ctx, out, s.shared_out, out);
  }
  if (then == nullptr) return;
  add_rms_norm(ctx, then->residual, out, then->weight, then->out, then->params);
  if (then->tap.defined()) convert(ctx, then->residual, then->tap);
}

}  // namespace dspark
