// DeepSeek sparse attention (DSA, GLM-5) over a paged cache of one latent "head" per token: an
// indexer picks, for every query, the keys it may attend to (index_topk), then attention runs over
// those keys only (sparse_paged_attention). Keys of a row are numbered by their slot in the row
// (0 .. kv_len-1), which is their absolute position. On CUDA the index tensors are device memory
// and their values are not checked; both ops work per query there too (batch-invariant), without
// host syncs, so they can be captured in CUDA graphs. index_topk's f32 scores are summed in
// another order than on the CPU: keys within rounding of the k-th score may be chosen differently
// (exact ties are broken alike). Limits on CUDA (unsupported beyond):
// sparse_paged_attention's Dq and Dv up to 576 and K / V pools of one dtype; index_topk's k such
// that its candidate buffer (8 * (k + max(k, 512)) bytes) and q (4 * H * (D + 1) bytes) fit in
// one block's shared memory (k = 2048 with 32 heads of 128 takes 49 KB).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// For query t of row r (q_indptr as in paged_attention) at position q_pos[t], every visible key
// j <= q_pos[t] (j < kv_lens[r]) of the row gets the score
//   s(t, j) = scale * sum_h head_weights[t, h] * relu(q[t, h, :] . K[r, j, 0, :])
// and ids[t, :] receives the k = ids.size(1) keys of highest score, in ascending position; a tie
// at the k-th score keeps the lower positions. A query that sees no more than k keys gets them
// all, followed by -1 entries.
//   q: [n, H, D] any float dtype (last dim contiguous); head_weights: [n, H] any float dtype (rows
//   contiguous); keys.k_pages: [n_pages, page_size, 1, D] any float dtype, last dim contiguous
//   (other strides free: e.g. some columns of a wider cache row); keys.v_pages is not read;
//   q_pos: i32 [n]; ids: i32 [n, k] contiguous, k >= 1. Scores in f32.
void index_topk(Context& ctx, const Tensor& q, const Tensor& head_weights, const PagedKv& keys,
                const Tensor& q_indptr, const Tensor& q_pos, float scale, const Tensor& ids);

// out[t, h, :] = sum_j softmax_j(scale * q[t, h, :] . K[j, :Dq]) V[j, :Dv] over the keys j in
// ids[t, :] (entries < 0 skipped) of query t's row: K and V the first Dq / Dv columns of the rows
// of kv.k_pages / kv.v_pages ([n_pages, page_size, 1, W], W >= Dq and Dv; the same pool for MLA's
// shared latent). A query with no key gets zeros.
//   q: [n, heads, Dq], out: [n, heads, Dv], any float dtypes, last dim contiguous (other strides
//   free); ids: i32 [n, k] contiguous, every entry < 0 or < its row's kv_len. Softmax in f32.
void sparse_paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv,
                            const Tensor& q_indptr, const Tensor& ids, float scale,
                            const Tensor& out);

}  // namespace dspark
