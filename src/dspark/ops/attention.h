// Attention over a paged KV cache, in one kernel family that covers the three forms dspark needs:
//  (a) causal prefill: the new tokens' K/V are written first (kv_write), then each query attends
//      causally over everything cached for its row;
//  (b) causal multi-token verify (1-32 queries per row) - the same call with short rows;
//  (c) non-causal block attention (drafters): block K/V appended after the prefix, causal = false,
//      every block query sees [prefix ++ whole block].
// Grouped-query heads (n_heads a multiple of n_kv_heads); optional sliding window; optional
// logit soft-cap. Keys of a row are numbered by their slot in the row (0 .. kv_len-1), which is
// their absolute position.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// PagedKv (one layer's paged cache and the batch's page table in CSR form) and AttentionParams
// (scale, causal, sliding window, soft cap) are in backend/op_params.h.

// Writes K/V of new tokens into their slots: slot s = page * page_size + offset.
//   k, v: [n, n_kv_heads, head_dim] (head_dim contiguous; token stride may be wider, e.g. slices of
//   a fused QKV output); slots: i32 [n]; k_pages/v_pages as in PagedKv (dtype converted).
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots,
              const Tensor& k_pages, const Tensor& v_pages);

// out[t, h, :] = sum_j softmax_j(scale * q[t, h, :] . K[row(t), j, h / group, :]) V[row(t), j, ...]
// over the keys j visible to query t (causal: j <= q_pos[t]; window: j > q_pos[t] - window).
//   q: [n_tokens, n_heads, head_dim] (head_dim contiguous); q_indptr: i32 [n_rows + 1] (queries of
//   row r are q[q_indptr[r] .. q_indptr[r+1])); q_pos: i32 [n_tokens] absolute positions;
//   out: [n_tokens, n_heads, head_dim] any float dtype. Softmax in f32. A query that sees no key
//   gets zeros.
// On CUDA the tensor-core kernel reads the K/V of a row's keys below min(kv_len - its queries,
// their q_pos) - everything but this step's tokens - before the kernel that precedes it in the
// stream has finished (programmatic dependent launch): those keys must have been written before
// that kernel started, as the engine's forwards do (the step's K/V are written by the layer's
// qkv_prologue, right before).
void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out);

}  // namespace dspark
