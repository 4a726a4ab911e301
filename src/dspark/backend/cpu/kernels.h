// CPU kernel entry points, one per op (implemented in backend/cpu/kernels/<op>.cpp). The ops layer
// (ops/*.cpp) validates shapes, dtypes and devices first; these assume valid arguments and take
// exactly the op's arguments (see ops/<op>.h for the documented shapes).
#pragma once

#include <span>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark::cpu {

void gather_rows(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out);
// gather_rows of a block-quantized table (rows dequantized; ops/embedding.h).
void gather_rows_blocks(Context& ctx, const WeightMatrix& table, const Tensor& ids,
                        const Tensor& out);
void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params);
void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params);
void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& out, float eps);
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
// linear with block-quantized weights (WeightFormat::blocks or blocks_x8; ops/matmul.h).
void linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                   const Tensor& y);
// linear_blocks of several weights of one shape and format, each over its own rows: rows
// [offsets[p], offsets[p + 1]) of x times w[p] into the same rows of y, no bias, in one pass of
// the pool (a MoE layer's experts); the bits of linear_blocks per weight.
void linear_blocks_grouped(Context& ctx, const Tensor& x, std::span<const WeightMatrix> w,
                           std::span<const int64_t> offsets, const Tensor& y);
// linear with FP8 block-scaled weights (WeightFormat::fp8_blocks; ops/matmul.h).
void linear_fp8_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                       const Tensor& y);
void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out);
void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void convert(Context& ctx, const Tensor& src, const Tensor& out);
void rope(Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          float attention_scaling);
void softmax(Context& ctx, const Tensor& x, const Tensor& out);
void log_softmax(Context& ctx, const Tensor& x, const Tensor& out);
void argmax(Context& ctx, const Tensor& x, const Tensor& out, const Tensor& index_map);
void moe_route(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
               const Tensor& weights);
void moe_route_grouped(Context& ctx, const Tensor& logits, const Tensor& bias,
                       const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights);
void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& slots, const Tensor& weights,
                 const Tensor& out);
void moe_group(Context& ctx, const Tensor& ids, const MoeGroups& g);
void apply_penalties(Context& ctx, const Tensor& logits, std::span<const PenaltyEntry> entries);
void apply_token_mask(Context& ctx, const Tensor& logits, std::span<const int32_t> rows,
                      std::span<const uint32_t> mask);
void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs);
void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens);
void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens);
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots,
              const Tensor& k_pages, const Tensor& v_pages);
void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out);
void index_topk(Context& ctx, const Tensor& q, const Tensor& head_weights, const PagedKv& keys,
                const Tensor& q_indptr, const Tensor& q_pos, float scale, const Tensor& ids);
void sparse_paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv,
                            const Tensor& q_indptr, const Tensor& ids, float scale,
                            const Tensor& out);
void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& modes, const Tensor& n_accepted, const Tensor& next_token);

void sigmoid_gate(Context& ctx, const Tensor& gate, const Tensor& x, const Tensor& out);
void rnn_head_cell(Context& ctx, const Tensor& proj, const Tensor& state, const Tensor& out);

}  // namespace dspark::cpu
