#include "dspark/backend/cuda/policy/attention.h"

#include <algorithm>

#include "dspark/backend/cuda/policy/common.h"

namespace dspark::cuda {

using policy_detail::ceil_div;

namespace {

// Split launches whose tiles are too big for the last-CTA merge are cluster-merged where the
// device has clusters (the tensor-core kernel; the CUDA-core kernel's go to the combine kernel).
bool cluster_eligible(int64_t tile_rows, const DeviceCaps& caps, const Tuning& t) {
  return t.attention_cluster_merge && tile_rows > t.attention_merge_rows && caps.compute_major == 9;
}

// The 64-key tiles of a row (the most splits that get a key each).
int64_t key_tiles_per_row(const AttentionShape& s) {
  return ceil_div(s.total_pages * s.page_size / s.n_rows, kAttentionSplitKeys);
}

// Decode tiles (those the last-CTA merge takes, and the one-token tiles of a launch with one query
// per row) cluster-merged: the most splits, or 0. Only while the cap leaves a split CTA at most
// kAttentionDecodeClusterTiles key tiles: past that the longer splits cost more than the cluster
// saves (H100, bench_attention, Qwen3-8B heads, one row: 1,024 keys 8.2 -> 7.4 us with 16 splits
// in a cluster against 17 merged by the last CTA, but 4,096 keys 12.3 -> 14.4 us and 16,384 keys
// 34.4 -> 35.9 us against 32 splits). Taller decode tiles (MLA's 16 heads of one token) took the
// verify tiles' cap of 8 balanced splits before: `bench_attention --mla --heads 16`, 1,024 keys,
// 6 splits 17.2 us -> 16 splits 14.5 us on an H100.
int64_t decode_cluster_splits(const AttentionShape& s, const QueryTiling& q, const DeviceCaps& caps,
                              const Tuning& t) {
  const bool decode =
      q.tile_rows <= t.attention_merge_rows || (s.n_tokens == s.n_rows && q.tokens_per_cta == 1);
  if (!t.attention_cluster_merge || !decode || caps.compute_major != 9 ||
      t.attention_decode_cluster_splits < 2)
    return 0;
  const int64_t most =
      std::min<int64_t>(t.attention_decode_cluster_splits, kAttentionMaxDecodeClusterSplits);
  return ceil_div(key_tiles_per_row(s), most) <= kAttentionDecodeClusterTiles ? most : 0;
}

}  // namespace

bool attention_on_tensor_cores(DType kv, DType q, int64_t head_dim, bool aligned, bool shared_kv) {
  return (kv == DType::bf16 || kv == DType::f16) && q == kv && aligned &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256 ||
          (head_dim == kAttentionLatentHeadDim && shared_kv));
}

QueryTiling attention_tiling(const AttentionShape& s) {
  QueryTiling t;
  const int64_t group = s.n_heads / s.n_kv_heads;
  t.heads_per_cta = std::min<int64_t>(group, kAttentionTileRows);
  t.tokens_per_cta = std::max<int64_t>(1, kAttentionTileRows / t.heads_per_cta);
  t.head_chunks = ceil_div(group, t.heads_per_cta);
  t.grid_x = ceil_div(s.n_tokens, t.tokens_per_cta);
  t.grid_y = s.n_kv_heads * t.head_chunks;
  t.tile_rows = std::min(t.tokens_per_cta, s.n_tokens) * t.heads_per_cta;
  return t;
}

int attention_splits(const AttentionShape& s, const DeviceCaps& caps, const Tuning& t) {
  if (t.batch_invariant || s.n_tokens <= 0 || s.n_rows <= 0 || s.n_kv_heads <= 0) return 1;
  const QueryTiling tiling = attention_tiling(s);
  const int64_t ctas = tiling.grid_x * tiling.grid_y;
  const int64_t target = 2 * static_cast<int64_t>(caps.sm_count);
  if (ctas >= target) return 1;
  const int64_t useful = key_tiles_per_row(s);
  int64_t n_splits =
      std::clamp<int64_t>(std::min(ceil_div(target, ctas), useful), 1, kAttentionMaxSplits);
  if (const int64_t most = decode_cluster_splits(s, tiling, caps, t); most > 0)
    return static_cast<int>(std::min(n_splits, most));
  if (cluster_eligible(tiling.tile_rows, caps, t)) {
    n_splits = std::min<int64_t>(n_splits, kAttentionMaxClusterSplits);
    // A row's key tiles are dealt evenly over the splits: of the counts that give a CTA at most
    // as many tiles, the fewest leave the fewest CTAs to merge (a verify at context 1,024: 17
    // tiles, 7 splits -> 6). Not for decode tiles, where fewer, longer splits were slower.
    if (useful > 0) n_splits = ceil_div(useful, ceil_div(useful, n_splits));
  }
  return static_cast<int>(n_splits);
}

AttentionPlan plan_attention(const AttentionShape& s, bool tensor_cores, const DeviceCaps& caps,
                             const Tuning& t) {
  AttentionPlan plan;
  plan.kernel = tensor_cores ? AttentionKernel::tensor_core : AttentionKernel::cuda_core;
  plan.tiling = attention_tiling(s);
  plan.n_splits = attention_splits(s, caps, t);
  if (plan.n_splits <= 1) return plan;
  const QueryTiling& q = plan.tiling;
  if (tensor_cores && decode_cluster_splits(s, q, caps, t) > 0)
    plan.merge = SplitMerge::cluster;
  else if (q.tile_rows <= t.attention_merge_rows && q.grid_x * q.grid_y <= kAttentionMergeTiles)
    plan.merge = SplitMerge::last_cta;
  else if (tensor_cores && plan.n_splits <= kAttentionMaxClusterSplits &&
           cluster_eligible(q.tile_rows, caps, t))
    plan.merge = SplitMerge::cluster;
  else
    plan.merge = SplitMerge::combine;
  return plan;
}

}  // namespace dspark::cuda
