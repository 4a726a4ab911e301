// What the two paged_attention kernels share (private to backend/cuda/kernels): the launch
// arguments, the CTA tiling of the query rows, and the tensor-core kernel's entry point.
//  - attention.cu: the op (ops/attention.h), the CUDA-core kernel for every dtype and head_dim,
//    the split merge (flash-decoding) and the choice between the kernels;
//  - attention_mma.cu: the tensor-core kernel for 16-bit caches and head_dim 64 / 128 / 256.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/policy/attention.h"

namespace dspark::cuda::attn {

// The tiling and split limits the choice of a launch uses (policy/attention.h): query rows
// (token, head) per CTA, of one KV head (both kernels tile the rows the same way); keys per split
// a multiple of kSplitKeys (the tensor-core kernel's key tile); the most splits, and the most of a
// cluster-merged launch (a decode launch's: the non-portable cluster size).
inline constexpr int kMaxRows = kAttentionTileRows;
inline constexpr int kSplitKeys = kAttentionSplitKeys;
inline constexpr int kMaxSplits = kAttentionMaxSplits;
inline constexpr int kMaxClusterSplits = kAttentionMaxDecodeClusterSplits;
inline constexpr float kLog2e = 1.4426950408889634f;

template <typename TKV>
struct AttentionArgs {
  const void* q;  // [n_tokens, n_heads, head_dim]
  device::FloatKind q_kind;
  int64_t q_stride_token, q_stride_head;
  void* out;  // [n_tokens, n_heads, head_dim]
  device::FloatKind out_kind;
  int64_t out_stride_token, out_stride_head;
  const TKV* k_pages;  // [n_pages, page_size, n_kv_heads, head_dim]
  const TKV* v_pages;
  int64_t page_stride, slot_stride, head_stride;
  const int32_t* q_indptr;      // [n_rows + 1]
  const int32_t* q_pos;         // [n_tokens]
  const int32_t* page_indptr;   // [n_rows + 1]
  const int32_t* page_indices;  // [page_indptr[n_rows]]
  const int32_t* kv_lens;       // [n_rows]
  int n_rows, n_tokens, n_heads, group, head_dim, page_size;
  int heads_per_cta, tokens_per_cta, head_chunks;
  float scale, softcap;
  int window;
  bool causal;
  bool vec_kv;  // K/V rows 16-byte aligned: vector loads
  int n_splits;
  float* part;  // n_splits > 1: [n_tokens, n_heads, n_splits, head_dim + 2] (acc..., max, sum)
  // n_splits > 1: one arrival counter per query tile (grid.x * grid.y, zero between launches);
  // the tile's last split CTA to finish merges the splits (merge_splits_if_last). Null: the
  // separate combine kernel merges them.
  unsigned* counters;
  // The tensor-core kernel's split merge in a thread-block cluster (SplitMerge::cluster, sm_90;
  // attention_mma.cu), set only with 2..kMaxClusterSplits splits and no counters: the split CTAs
  // of a query tile form one cluster along grid.z and merge the splits through distributed shared
  // memory (no `part` writes, no combine kernel).
  bool cluster;
};

// The query rows a CTA owns (grid: x = token tiles, y = KV head x head chunks, z = key splits):
// heads [h_begin, h_begin + nh) of KV head kv_head, tokens [t_begin, t_end).
struct CtaQueries {
  int kv_head, h_begin, nh, split, t_begin, t_end;
};
template <typename TKV>
__device__ __forceinline__ CtaQueries cta_queries(const AttentionArgs<TKV>& p) {
  CtaQueries q;
  q.kv_head = blockIdx.y / p.head_chunks;
  const int chunk = blockIdx.y - q.kv_head * p.head_chunks;
  q.h_begin = q.kv_head * p.group + chunk * p.heads_per_cta;
  q.nh = min(p.heads_per_cta, p.group - chunk * p.heads_per_cta);
  q.split = blockIdx.z;
  q.t_begin = blockIdx.x * p.tokens_per_cta;
  q.t_end = min(p.n_tokens, q.t_begin + p.tokens_per_cta);
  return q;
}

// The row of token t: the last row whose first query is <= t (a binary search over q_indptr).
__device__ __forceinline__ int row_of_token(const int32_t* q_indptr, int n_rows, int t) {
  int lo = 0, hi = n_rows - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (q_indptr[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Merges the n_splits partial softmax states (acc..., max, sum; max in log2 units) of one
// (token, head) into out[base .. base + head_dim), in one warp. Lane s reads split s's max and
// sum (n_splits <= 32), so the loads are issued together rather than one dependent round trip
// per split; the sums are still added in split order (the values of a sequential loop). The
// partials are read through L2 (__ldcg): other CTAs wrote them in this launch.
// merge_split_item_from: the same with element i of split s's row at load(s, i) (the early decode
// variant reads them from its shared memory, the cluster variant from its cluster peers' shared
// memory: attention_mma.cu), for n_splits <= kSplitsMax (a smaller bound only drops loop steps
// that do nothing: the same values).
static_assert(kMaxSplits <= 32);
// The merge's weights: lane s holds split s's max ms and sum ls (lanes >= n_splits: -inf, 0);
// w[s] is split s's weight exp2(ms - max) in every lane, and the result 1 / (the weighted sums
// added in split order), 0 for an empty row.
template <int kSplitsMax>
__device__ __forceinline__ float split_weights(float ms, float ls, int n_splits,
                                               float (&w)[kSplitsMax]) {
  const float m = device::warp_max(ms);
  const float weight = ms > -INFINITY ? exp2f(ms - m) : 0.0f;  // this lane's split
  float l = 0.0f;
#pragma unroll
  for (int s = 0; s < kSplitsMax; ++s) {
    w[s] = __shfl_sync(device::kFullMask, weight, s);
    const float term = __shfl_sync(device::kFullMask, ls * weight, s);
    if (s < n_splits) l += term;
  }
  return l > 0.0f ? 1.0f / l : 0.0f;
}
template <int kSplitsMax = kMaxSplits, typename Load>
__device__ __forceinline__ void merge_split_item_from(Load load, int n_splits, int head_dim,
                                                      void* out, device::FloatKind out_kind,
                                                      int64_t base, int lane) {
  static_assert(kSplitsMax <= kMaxSplits);
  const bool mine = lane < n_splits;
  const float ms = mine ? load(lane, int64_t{head_dim}) : -INFINITY;
  const float ls = mine ? load(lane, int64_t{head_dim} + 1) : 0.0f;
  float w[kSplitsMax];  // every split's weight, in every lane (before lanes diverge over d)
  const float inv = split_weights(ms, ls, n_splits, w);
  for (int d = lane; d < head_dim; d += 32) {
    float o = 0.0f;
#pragma unroll
    for (int s = 0; s < kSplitsMax; ++s) {
      if (s < n_splits && w[s] > 0.0f) o += load(s, d) * w[s];
    }
    device::store_float(out, base + d, out_kind, o * inv);
  }
}
// merge_split_item_from's operations in its order (the same bits) for a compile-time head_dim HD:
// every load of the item (each split's max and sum, and the HD / 32 values of this lane in every
// split) is issued before the first of them is used, so the round trips (to the cluster peers'
// shared memory: merge_splits_cluster) overlap instead of following each other per split and
// column step.
template <int HD, int kSplitsMax, typename Load>
__device__ __forceinline__ void merge_split_item_batched(Load load, int n_splits, void* out,
                                                         device::FloatKind out_kind, int64_t base,
                                                         int lane) {
  static_assert(HD % 32 == 0 && kSplitsMax <= kMaxSplits);
  constexpr int kD = HD / 32;
  // Splits whose values are in flight together (the registers of at most 8 splits' columns).
  constexpr int kBatch = kSplitsMax < 8 ? kSplitsMax : 8;
  const bool mine = lane < n_splits;
  float ms = -INFINITY, ls = 0.0f;
  if (mine) {
    ms = load(lane, int64_t{HD});
    ls = load(lane, int64_t{HD} + 1);
  }
  float w[kSplitsMax];
  const float inv = split_weights(ms, ls, n_splits, w);
  float o[kD] = {};
#pragma unroll
  for (int s0 = 0; s0 < kSplitsMax; s0 += kBatch) {
    if (s0 >= n_splits) break;
    float v[kBatch][kD];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
#pragma unroll
      for (int j = 0; j < kD; ++j)
        v[b][j] = s0 + b < n_splits ? load(s0 + b, int64_t{lane} + 32 * j) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kD; ++j) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (s0 + b < n_splits && w[s0 + b] > 0.0f) o[j] += v[b][j] * w[s0 + b];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kD; ++j) device::store_float(out, base + lane + 32 * j, out_kind, o[j] * inv);
}

__device__ __forceinline__ void merge_split_item(const float* part, int n_splits, int head_dim,
                                                 void* out, device::FloatKind out_kind,
                                                 int64_t base, int lane) {
  const int64_t stride = head_dim + 2;
  merge_split_item_from(
      [part, stride](int s, int64_t i) { return __ldcg(part + (s * stride + i)); }, n_splits,
      head_dim, out, out_kind, base, lane);
}

// Bytes of the kernels' dynamic shared memory that the merge below reuses once the CTA's own work
// is done: every row's split weights and 1 / sum. Both launchers assert that they have as much.
inline constexpr size_t kMergeSmemBytes = sizeof(float) * kMaxRows * (kMaxSplits + 1);

// The end of a split CTA (n_splits > 1, counters set), called by every thread after its
// partials are written: the last of the query tile's n_splits CTAs to arrive merges the tile's
// (token, head) rows and resets the tile's counter. The merge gives the combine kernel's values
// bit for bit (the same operations in the same order as merge_split_item). With at most one row
// per warp (decode), each warp merges its row. With more rows (verify, draft blocks), merging
// them one after the other in each warp made a long serial tail, so the work is split in two:
// one warp per row computes the splits' weights and 1 / sum into shared memory (`smem`: the
// kernel's dynamic shared memory, free by then, kMergeSmemBytes), then every thread of the CTA
// takes (row, column) items, so the partials' loads of all rows are in flight together.
template <typename TKV>
__device__ void merge_splits_if_last(const AttentionArgs<TKV>& p, const CtaQueries& cq,
                                     float* smem) {
  __shared__ bool s_last;
  const unsigned tile = blockIdx.x + gridDim.x * blockIdx.y;
  __threadfence();  // this thread's partials, before the CTA's arrival
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(p.counters + tile, 1u) == gridDim.z - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int n_items = (cq.t_end - cq.t_begin) * cq.nh;
  const int64_t stride = p.head_dim + 2;
  auto part_of = [&](int i) {
    const int64_t tok = cq.t_begin + i / cq.nh, h = cq.h_begin + i % cq.nh;
    return p.part + (tok * p.n_heads + h) * p.n_splits * stride;
  };
  auto out_base = [&](int i) {
    const int64_t tok = cq.t_begin + i / cq.nh, h = cq.h_begin + i % cq.nh;
    return tok * p.out_stride_token + h * p.out_stride_head;
  };
  if (n_items <= n_warps) {
    if (warp < n_items)
      merge_split_item(part_of(warp), p.n_splits, p.head_dim, p.out, p.out_kind, out_base(warp),
                       lane);
  } else {
    float* s_w = smem;                            // [kMaxRows][kMaxSplits]: split s's weight
    float* s_inv = smem + kMaxRows * kMaxSplits;  // [kMaxRows]: 1 / sum
    for (int i = warp; i < n_items; i += n_warps) {
      const float* part = part_of(i);
      const bool mine = lane < p.n_splits;
      const float ms = mine ? __ldcg(part + lane * stride + p.head_dim) : -INFINITY;
      const float ls = mine ? __ldcg(part + lane * stride + p.head_dim + 1) : 0.0f;
      const float m = device::warp_max(ms);
      const float weight = ms > -INFINITY ? exp2f(ms - m) : 0.0f;
      float l = 0.0f;
#pragma unroll
      for (int s = 0; s < kMaxSplits; ++s) {
        const float term = __shfl_sync(device::kFullMask, ls * weight, s);
        if (s < p.n_splits) l += term;
      }
      s_w[i * kMaxSplits + lane] = weight;
      if (lane == 0) s_inv[i] = l > 0.0f ? 1.0f / l : 0.0f;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < n_items * p.head_dim; idx += blockDim.x) {
      const int i = idx / p.head_dim, d = idx - i * p.head_dim;
      const float* part = part_of(i);
      const float* w = s_w + i * kMaxSplits;
      float o = 0.0f;
      for (int s = 0; s < p.n_splits; ++s) {
        if (w[s] > 0.0f) o += __ldcg(part + s * stride + d) * w[s];
      }
      device::store_float(p.out, out_base(i) + d, p.out_kind, o * s_inv[i]);
    }
  }
  if (threadIdx.x == 0) p.counters[tile] = 0;  // ready for the next launch
}

// The offset in the pages of key j's K / V row of KV head kv_head (row_pages: the request's page
// ids), or -1 for a key outside the CTA's visible keys [kmin, kmax).
template <typename TKV>
__device__ __forceinline__ int64_t key_row_offset(const AttentionArgs<TKV>& p,
                                                  const int32_t* row_pages, int kv_head, int kmin,
                                                  int kmax, int j) {
  if (j < kmin || j >= kmax) return -1;
  return static_cast<int64_t>(row_pages[j / p.page_size]) * p.page_stride +
         static_cast<int64_t>(j % p.page_size) * p.slot_stride +
         static_cast<int64_t>(kv_head) * p.head_stride;
}

// The tensor-core kernels' K/V tile copies, one 16-byte chunk: columns cc * 8 .. of key j's K and
// V rows (at `off` in the pages; -1: no row of the CTA sees the key) into sk / sv by cp.async when
// j is in [key_lo, key_hi); a chunk without a key is zero-filled when `zero` (by the same
// cp.async, reading nothing: part of the thread's group, like the copies). Predicated, without
// branches, so that a tile's chunks issue back to back. kWithV false: K only (a cache whose V is
// its K, MLA's latent; sv unused).
template <typename TKV, bool kWithV = true>
__device__ __forceinline__ void copy_kv_chunk(const AttentionArgs<TKV>& p, int64_t off, int j,
                                              int cc, int key_lo, int key_hi, bool zero, TKV* sk,
                                              TKV* sv) {
  const bool visible = off >= 0;
  const bool issue = visible ? j >= key_lo && j < key_hi : zero;
  const int64_t at = visible ? off + cc * 8 : 0;
  const int bytes = visible ? 16 : 0;
  device::cp_async16_if(sk, p.k_pages + at, bytes, issue);
  if constexpr (kWithV) device::cp_async16_if(sv, p.v_pages + at, bytes, issue);
}

// The cluster merge of one segment's n_q partial rows (tokens from t, heads from h_begin; row i
// at s_part + i * (HD + 2): acc..., max, sum, the values the other paths write to `part`),
// called by every thread of every CTA of the cluster once its own rows are in s_part. The launch
// makes the n_splits CTAs of a query tile one cluster of {1, 1, n_splits}, so cluster rank s is
// split s. CTA r merges rows r, r + S, ... (S = n_splits), a warp per row, with
// merge_split_item_batched reading split s's row from rank s's shared memory (all of the row's
// loads in flight together): combine_splits_kernel's operations in its order, so the same bits.
// Every CTA of a cluster runs the same segments (they depend on the query tile only), so the
// barriers pair up. n_warps: the CTA's warps. Used by the tensor-core kernel (attention_mma.cu).
template <int HD, typename TKV>
__device__ __forceinline__ void merge_splits_cluster(const AttentionArgs<TKV>& p, float* s_part,
                                                     int n_q, int t, int nh, int h_begin,
                                                     int n_warps) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kPartLd = HD + 2;
  using Cluster = cooperative_groups::cluster_group;
  Cluster::sync();  // every CTA's partial rows are written (arrive releases, wait acquires)
  const int n_splits = p.n_splits, rank = static_cast<int>(Cluster::block_rank());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = rank + warp * n_splits; i < n_q; i += n_warps * n_splits) {
    float* row = s_part + i * kPartLd;
    const int64_t tok = t + i / nh, h = h_begin + i % nh;
    merge_split_item_batched<HD, kMaxClusterSplits>(
        [row](int s, int64_t j) { return Cluster::map_shared_rank(row, s)[j]; }, n_splits, p.out,
        p.out_kind, tok * p.out_stride_token + h * p.out_stride_head, lane);
  }
  Cluster::sync();  // the peers have read this CTA's rows: its shared memory may be reused or freed
#else
  __trap();  // no clusters on this target (compute_80 PTX): launched on sm_90 only (the policy)
#endif
}

// The tensor-core kernel for a call the policy gave it (attention_on_tensor_cores: K/V and q of
// one 16-bit dtype, head_dim 64 / 128 / 256, 16-byte aligned rows). Same grid and outputs as the
// CUDA-core kernel (where it merges its splits through shared memory, partial rows head_dim + 4
// floats apart instead of head_dim + 2).
template <typename TKV>
void launch_attention_mma(Context& ctx, const AttentionArgs<TKV>& args, dim3 grid);

// One key tile of the CUDA-core kernels' online softmax (paged_attention's and
// sparse_paged_attention's), for the query row of a warp: lane j holds key j's score s, already
// scaled by log2e, and whether key j counts (s is -inf otherwise); at least one key of the tile
// counts. Updates the row's running max m and sum l (base-2 exponentials, f32) and its output
// columns acc[c] (column lane + 32 c) from the tile's V rows, v_tile[j * v_ld + column].
template <int NC, int kTile>
__device__ __forceinline__ void online_softmax_tile(float s, bool counts, float& m, float& l,
                                                    float (&acc)[NC], const float* v_tile, int v_ld,
                                                    int lane) {
  const float m_new = fmaxf(m, device::warp_max(s));  // finite: a key of the tile counts
  const float alpha = exp2f(m - m_new);               // 0 on the first tile with a key
  const float w = counts ? exp2f(s - m_new) : 0.0f;
  l = l * alpha + device::warp_sum(w);
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] *= alpha;
#pragma unroll 8
  for (int jj = 0; jj < kTile; ++jj) {
    const float wj = __shfl_sync(device::kFullMask, w, jj);
    const float* v_row = v_tile + jj * v_ld + lane;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] += wj * v_row[32 * c];
  }
  m = m_new;
}

}  // namespace dspark::cuda::attn
