// Mixture-of-experts routing and combination: Qwen3-MoE's (softmax over the experts, top-k,
// optional renormalisation) and DeepSeek-V3's (sigmoid scores, a selection bias, group-limited
// top-k, routed scaling). The experts themselves are SwiGLU MLPs run through linear() on the
// rows routed to them: moe_group groups the (token, choice) pairs by expert on the device and
// moe_linear multiplies each expert's rows by that expert's matrix, so a MoE layer needs no
// round trip to the host (a decode or verify forward can be captured in a CUDA graph).
#pragma once

#include <cstdint>

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

// moe_route then moe_group of the chosen ids (g as moe_group's, for ids' n * k pairs): the same
// results. CUDA routes and groups up to 32 rows in one launch.
void moe_route_and_group(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
                         const Tensor& weights, const MoeGroups& g);
// moe_route_grouped then moe_group, as moe_route_and_group.
void moe_route_grouped_and_group(Context& ctx, const Tensor& logits, const Tensor& bias,
                                 const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights,
                                 const MoeGroups& g);
// out[r, :] = sum_{j < k} weights[r, j] * expert_out[slots[r, j], :], summed in f32 in order of j.
// expert_out: [m, H] any float dtype (rows contiguous): the experts' outputs, one row per
// (token, choice); slots: i32 [n, k] contiguous, each in [0, m) (the kernels trust them: the
// caller builds them); weights: f32 [n, k] contiguous; out: [n, H] any float dtype, which must
// not overlap expert_out (not checked).
void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& slots, const Tensor& weights,
                 const Tensor& out);

// Groups the choices ids [n, k] (i32, each in [0, E): the kernels trust them, moe_route writes
// them) of n tokens by expert, E = g.offsets.size(0) - 1: a stable counting sort, so the result
// depends on ids only (the same on every backend). A token lists an expert at most once.
void moe_group(Context& ctx, const Tensor& ids, const MoeGroups& g);

// y[r, :] = x[r, :] . w_e^T for each grouped row r of expert e (g from moe_group), where w holds
// the E experts' matrices stacked along its rows, w_e its rows [e * N, (e + 1) * N) and
// N = w.n / E: x [m, K] and y [m, N] with rows contiguous (y may be a column slice of a wider
// buffer), m = g.order.size(0). w in any format linear() takes; each product is linear()'s on
// the expert's rows (with block formats on the CPU every expert's in one pass of the thread pool,
// the same bits), or (on CUDA, moe_linear_on_device) one kernel over every expert whose sums
// run in a fixed order per output, whatever the number of rows: a row's result does not depend
// on the other rows. Experts without rows are not read.
void moe_linear(Context& ctx, const Tensor& x, const WeightMatrix& w, const MoeGroups& g,
                const Tensor& y);

// moe_linear of the tokens' rows grouped by expert: row r of the product is x[g.order[r], :], for
// x [n, K] (one row per token of the n that g groups; rows contiguous) and y [m, N] as in
// moe_linear. The same as gather_rows(x, g.order, rows) then moe_linear(rows, ...), bit for bit;
// rows ([m, K], x's dtype, rows contiguous) is the buffer that gathered copy goes to on the paths
// that need one. CUDA's device paths (moe_linear_on_device) read the rows of x in place.
void moe_linear_gather(Context& ctx, const Tensor& x, const Tensor& rows, const WeightMatrix& w,
                       const MoeGroups& g, const Tensor& y);
// moe_linear of SwiGLU's rows: act = swiglu(gate_up[:, :I], gate_up[:, I:]) (ops/activation.h) in
// act's dtype, I = act.size(1) = w.k, then y = moe_linear(act, w, g); gate_up [m, 2 I] and act
// [m, I] with rows contiguous. The same as swiglu then moe_linear on the same backend, bit for bit;
// act gets SwiGLU's rows on the paths that need them. CUDA's block experts (moe_linear_on_device,
// gate_up in act's dtype) compute them while rounding x and leave act unwritten.
void moe_linear_swiglu(Context& ctx, const Tensor& gate_up, const Tensor& act,
                       const WeightMatrix& w, const MoeGroups& g, const Tensor& y);
// Whether moe_linear of m rows of x dtype `x` runs without waiting for the host (it then can be
// captured in a CUDA graph): always on the CPU; on CUDA for m <= kMoeDeviceRows and either a dense
// w of bf16, f16 or f32 with x of w's dtype and K a multiple of 16 bytes of it, or GGUF blocks
// (WeightFormat::blocks) with K a multiple of 256, x of f32, bf16 or f16 and compute capability
// 8.0+ (x rounded to int8 per block of 32 as the few-row linear kernel does). Otherwise CUDA reads
// the grouping back to the host and runs linear() per expert (prefill: many rows per expert).
inline constexpr int64_t kMoeDeviceRows = 512;
bool moe_linear_on_device(const Context& ctx, const WeightMatrix& w, DType x, int64_t m);

}  // namespace dspark
