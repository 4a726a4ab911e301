// How paged_attention runs on CUDA (kernels/attention.cu, attention_mma.cu): the kernel, the CTA
// tiling of the query rows, the split of the keys over CTAs (flash-decoding) and how the splits
// are merged. Pure functions of the call's shape and the context's caps and tuning. Host-only.
#pragma once

#include <cstdint>

#include "dspark/backend/cuda/policy/device.h"
#include "dspark/core/dtype.h"

namespace dspark::cuda {

// Query rows (token, head) per CTA, all of one KV head; both kernels tile the rows the same way,
// so the split count does not depend on which kernel runs.
inline constexpr int kAttentionTileRows = 16;
// Keys per split are a multiple of this (the tensor-core kernel's key tile).
inline constexpr int kAttentionSplitKeys = 64;
inline constexpr int kAttentionMaxSplits = 32;
// MLA's absorbed form: a latent of 512 and a rope key of 64, one KV head whose V pages are its K
// pages; the tensor-core kernel takes this head_dim only then.
inline constexpr int64_t kAttentionLatentHeadDim = 576;
// The most splits of a cluster-merged launch: the portable cluster size; for decode tiles the
// non-portable size of sm_90 (Tuning::attention_decode_cluster_splits).
inline constexpr int kAttentionMaxClusterSplits = 8;
inline constexpr int kAttentionMaxDecodeClusterSplits = 16;
// Decode tiles are cluster-merged only while that leaves a split at most this many 64-key tiles
// (contexts up to 2,048 keys at 16 splits); longer rows keep more splits and the last-CTA merge.
inline constexpr int kAttentionDecodeClusterTiles = 2;
// Query tiles the last-CTA merge's arrival counters cover.
inline constexpr int64_t kAttentionMergeTiles = 4096;

// One paged_attention call as the choice sees it.
struct AttentionShape {
  int64_t n_tokens = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t n_rows = 0;       // requests (q_indptr.numel() - 1)
  int64_t total_pages = 0;  // page_indices.numel(): the pages of all requests
  int64_t page_size = 0;
};

// The grid's x (token tiles) and y (KV heads x head chunks); a tile holds heads_per_cta heads of a
// GQA group x tokens_per_cta consecutive tokens.
struct QueryTiling {
  int64_t heads_per_cta = 0, tokens_per_cta = 0, head_chunks = 0, grid_x = 0, grid_y = 0;
  int64_t tile_rows = 0;  // query rows of a full tile: min(tokens_per_cta, n_tokens) x heads
};

enum class AttentionKernel {
  tensor_core,  // attention_mma.cu: 16-bit caches, head_dim 64 / 128 / 256, 576 with V = K
  cuda_core,    // attention.cu: any dtype, head_dim <= 576
};

enum class SplitMerge {
  none,      // one split
  last_cta,  // the last split CTA of a tile to finish merges it (arrival counters)
  cluster,   // the split CTAs of a tile form a thread-block cluster (tensor-core kernel, sm_90)
  combine,   // a separate combine kernel
};

struct AttentionPlan {
  AttentionKernel kernel = AttentionKernel::cuda_core;
  QueryTiling tiling;
  int n_splits = 1;
  SplitMerge merge = SplitMerge::none;
};

// Whether the tensor-core kernel takes a call: a 16-bit KV cache, q of the same dtype, head_dim
// 64, 128 or 256, or 576 with `shared_kv` (V pages that are the K pages: MLA's latent), and
// `aligned` (q and the pages 16-byte aligned, their strides multiples of 8 elements).
bool attention_on_tensor_cores(DType kv, DType q, int64_t head_dim, bool aligned,
                               bool shared_kv = false);

QueryTiling attention_tiling(const AttentionShape& s);

// The split count: more CTAs per query tile when the tiles alone cannot fill the GPU (two CTAs
// per multiprocessor), at most one per 64 keys of a request, at most kAttentionMaxClusterSplits
// when the tiles would be cluster-merged, then the fewest splits that give a CTA no more key
// tiles. A captured forward is keyed by it (backend/graph_set.h), so it depends on the shape,
// caps and tuning only, not on which kernel runs. Decode tiles (at most
// Tuning::attention_merge_rows rows, or tiles of one token when every row has one query)
// cluster-merged on sm_90 (Tuning::attention_decode_cluster_splits, rows of at most 16 x
// kAttentionDecodeClusterTiles key tiles) take the CTA target's count capped at that size,
// unbalanced (fewer, longer splits are slower at decode). One split with t.batch_invariant: a row's
// keys are then summed in key order by one CTA whatever the other rows.
int attention_splits(const AttentionShape& s, const DeviceCaps& caps, const Tuning& t);

// The whole plan; `tensor_cores`: attention_on_tensor_cores for the call.
AttentionPlan plan_attention(const AttentionShape& s, bool tensor_cores, const DeviceCaps& caps,
                             const Tuning& t);

}  // namespace dspark::cuda
