// What the two paged_attention kernels share (private to backend/cuda/kernels): the launch
// arguments, the CTA tiling of the query rows, and the tensor-core kernel's entry point.
//  - attention.cu: the op (ops/attention.h), the CUDA-core kernel for every dtype and head_dim,
//    the split merge (flash-decoding) and the choice between the kernels;
//  - attention_mma.cu: the tensor-core kernel for 16-bit caches and head_dim 64 / 128 / 256.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/device/convert.cuh"

namespace dspark::cuda::attn {

// Query rows (token, head) per CTA, of one KV head: both kernels tile the rows the same way, so
// the split count (and a captured graph's key, paged_attention_splits) does not depend on which
// kernel runs.
inline constexpr int kMaxRows = 16;
// Keys per split are a multiple of this (paged_attention_splits; the tensor-core kernel's tile).
inline constexpr int kSplitKeys = 64;
inline constexpr int kMaxSplits = 32;
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

// The tensor-core kernel: launches it and returns true when the call fits (K/V and q of the same
// 16-bit dtype, head_dim 64 / 128 / 256, 16-byte aligned rows, the path enabled); returns false,
// doing nothing, otherwise. Same grid, outputs and partial results as the CUDA-core kernel.
template <typename TKV>
bool launch_attention_mma(Context& ctx, const AttentionArgs<TKV>& args, dim3 grid);

}  // namespace dspark::cuda::attn
