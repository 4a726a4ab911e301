// Mixture-of-experts routing and combination: Qwen3-MoE's (softmax over the experts, top-k,
// optional renormalisation) and DeepSeek-V3's (sigmoid scores, a selection bias, group-limited
// top-k, routed scaling). The experts themselves are SwiGLU MLPs run through linear() on the
// rows routed to them (model/moe.h groups the rows by expert).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// Per row r of the router logits [n, E] (any float dtype, rows contiguous):
//   p = softmax(logits[r, :]) in f32;
//   ids[r, :] = the k = ids.size(1) experts of largest p, largest first; equal p: the lower
//               index first; NaN is never chosen before a number. (torch.topk promises no
//               order for ties: on the CPU topk([1, 3, 3, 0, 3], 3) gives [2, 4, 1]. Routing
//               equals transformers' where the probabilities differ, which the goldens check.)
//   weights[r, j] = p[ids[r, j]], divided by the sum of the k chosen p when `normalize`
//   (Hugging Face's norm_topk_prob).
// ids: i32 [n, k], weights: f32 [n, k], both contiguous; 1 <= k <= E.
void moe_route(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
               const Tensor& weights);

// DeepSeek-V3 routing (transformers' DeepseekV3TopkRouter). Per row r of the router logits
// [n, E] (any float dtype, rows contiguous), with G = p.n_group groups of E / G consecutive
// experts:
//   s = sigmoid(logits[r, :]) in f32; c = s + bias (bias: f32 [E], e_score_correction_bias);
//   group g scores the sum of the two largest c of its experts; the p.topk_group best groups are
//   kept (larger first, equal: the lower index);
//   ids[r, :] = the k = ids.size(1) experts of the kept groups of largest c, largest first
//               (equal: the lower index; NaN is never chosen before a number);
//   weights[r, j] = s[ids[r, j]] (the uncorrected score), divided by (the sum of the k chosen s +
//   1e-20) when p.normalize, times p.scale.
// ids: i32 [n, k], weights: f32 [n, k], both contiguous. Requires G to divide E with at least 2
// experts per group, 1 <= topk_group <= G and 1 <= k <= topk_group * E / G.
void moe_route_grouped(Context& ctx, const Tensor& logits, const Tensor& bias,
                       const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights);

// out[r, :] = sum_{j < k} weights[r, j] * expert_out[slots[r, j], :], summed in f32 in order of j.
// expert_out: [m, H] any float dtype (rows contiguous): the experts' outputs, one row per
// (token, choice); slots: i32 [n, k] contiguous, each in [0, m) (the kernels trust them: the
// caller builds them); weights: f32 [n, k] contiguous; out: [n, H] any float dtype, which must
// not overlap expert_out (not checked).
void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& slots, const Tensor& weights,
                 const Tensor& out);

}  // namespace dspark
