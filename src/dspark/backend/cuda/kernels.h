// CUDA launchers, one per op (implemented in backend/cuda/kernels/<op>.cu; no CUDA includes here).
// They enqueue on ctx.cuda_stream() and never synchronise. The ops layer (ops/*.cpp) validates
// shapes, dtypes and devices first; these assume valid arguments and take exactly the op's
// arguments (see ops/<op>.h for the documented shapes). Which kernel a launcher runs is a pure
// function of the call's shape and dtypes and the context's caps and tuning (policy/).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

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
// linear with block-quantized weights (WeightFormat::blocks; ops/matmul.h).
void linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                   const Tensor& y);
// out = swiglu(x . dequantize(w)^T) over w's gate rows then up rows (ops/matmul.h's
// linear_swiglu) in one launch; false (nothing launched) where linear_blocks would not take the
// few-row kernel or the kernel cannot pair the rows.
bool linear_blocks_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& out);
// ya = x . dequantize(wa)^T (+ bias_a) and yb likewise (ops/matmul.h's linear_pair) in one
// launch; false (nothing launched) where linear_blocks would not take the few-row kernel for
// both or the kernel is not built for the two types.
bool linear_blocks_pair(Context& ctx, const Tensor& x, const WeightMatrix& wa, const Tensor& bias_a,
                        const Tensor& ya, const WeightMatrix& wb, const Tensor& bias_b,
                        const Tensor& yb);
void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params, const LinearNormExtras& extras);
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
void moe_route_and_group(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
                         const Tensor& weights, const MoeGroups& g);
void moe_route_grouped_and_group(Context& ctx, const Tensor& logits, const Tensor& bias,
                                 const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights,
                                 const MoeGroups& g);
// With `gather` x holds the tokens' rows (moe_linear_gather).
void moe_linear(Context& ctx, const Tensor& x, const Tensor& w, const MoeGroups& g, const Tensor& y,
                bool gather = false);
// moe_linear with block-quantized experts (WeightFormat::blocks, K a multiple of 256); with
// `gather` x holds the tokens' rows and row r of the product is x[g.order[r]] (moe_linear_gather);
// with a swiglu_act dtype x holds [gate | up] rows of 2K values and the product's x is their
// swiglu in that dtype (moe_linear_swiglu).
void moe_linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const MoeGroups& g,
                       const Tensor& y, bool gather = false,
                       std::optional<DType> swiglu_act = std::nullopt);
// linear_per_head in one launch; false (nothing launched) where the kernel does not take the
// call's dtypes or alignment.
bool linear_per_head(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y);
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
// The fused prologue (ops/qkv_prologue.h); the ops layer has checked that it applies (head_dim 64,
// 128 or 256, full rotation, contiguous pages).
void qkv_prologue(Context& ctx, const QkvPrologueArgs& a);
// The fused MLA prologue (ops/mla_prologue.h); the ops layer has checked that it applies (pages
// of exactly the latent row, rope <= 256 and fully rotated).
void mla_prologue(Context& ctx, const MlaPrologueArgs& a);
void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out);
// The number of key splits paged_attention takes for a launch of this shape on ctx
// (policy/attention.h, attention_splits): a captured forward is only bitwise equal to the eager
// one when captured with the same count, so graphs are keyed by it (attention_graph_variant,
// backend/graph_set.h). `total_pages` is page_indices.numel() of the batch.
int paged_attention_splits(const Context& ctx, int64_t n_tokens, int64_t n_heads,
                           int64_t n_kv_heads, int64_t n_rows, int64_t total_pages,
                           int64_t page_size);
// DeepSeek sparse attention (ops/sparse_attention.h); per query, so batch-invariant as they are.
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
// false: the fused kernel does not apply (see ops/head_cells.h), nothing was launched.
bool markov_greedy_step(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& prev,
                        const Tensor& z, const Tensor& next, const Tensor& index_map);
bool markov_greedy_loop(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& tokens,
                        const Tensor& z, int64_t rows, int64_t steps, const Tensor& index_map);

// FP8 weights with per-row scales (ops/linear_fp8.h); the ops layer checked the shapes.
void quantize_rows_fp8(Context& ctx, const Tensor& w, const Tensor& w8, const Tensor& scale);
void linear_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const Tensor& scale,
                const Tensor& bias, const Tensor& y);
// linear with FP8 block-scaled weights (WeightFormat::fp8_blocks; ops/matmul.h), the same kernels.
void linear_fp8_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                       const Tensor& y);

}  // namespace dspark::cuda
