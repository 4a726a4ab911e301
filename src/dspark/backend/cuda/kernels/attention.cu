// kv_write and paged_attention (contract: ops/attention.h).
//
// paged_attention runs on tensor cores when the call fits (16-bit caches, head_dim 64 / 128 / 256:
// attention_mma.cu) and otherwise on this flash-decoding-style kernel on CUDA cores:
//  - a CTA (4 warps) owns up to 16 query rows = (query token, query head) pairs that share one KV
//    head: `heads_per_cta` heads of a GQA group x `tokens_per_cta` consecutive tokens. A token
//    tile that crosses a row boundary of q_indptr is processed as consecutive one-row segments;
//  - it walks the keys visible to any of its rows in tiles of 32, reading each key through the CSR
//    page table; K and V tiles are converted to f32 in shared memory (K rows padded by one float,
//    so the per-lane key reads are free of bank conflicts);
//  - each warp owns 4 query rows: lane j scores key j of the tile (q . k over the padded head dim,
//    q pre-scaled in shared memory), then an online softmax in f32 (base-2 exponentials of
//    log2e-scaled scores) updates the running max / sum, and the P.V product accumulates with
//    lanes over head_dim (head_dim / 32 registers per lane and row);
//  - when there are too few CTAs to fill the GPU (decode), the key tiles are dealt round-robin to
//    `n_splits` CTAs per query tile (grid.z); each writes (unnormalised output, max, sum) into
//    scratch, and the splits are merged (flash-decoding): by the last of them to finish (an
//    arrival counter per query tile) when the tile has at most attention_merge_rows() rows (4 by
//    default: decode), else - or with more tiles than the counters cover - by a separate combine
//    kernel;
//  - the tensor-core kernel runs its early variant by default (attention_mma.cu: K/V copied
//    before the PDL wait, decode splits merged in shared memory); DSPARK_ATTN_DECODE=1
//    (set_attention_decode(1)) selects the previous path, for A/B measurements;
//  - on sm_90 (by default; DSPARK_ATTN_CLUSTER=0 or set_attention_cluster(false) turns it off),
//    the tensor-core kernel merges the
//    splits of tiles left to the combine kernel inside a thread-block cluster of the tile's split
//    CTAs (attention_mma.cu); such launches are capped at 8 splits (cluster_merge).
// Masking per query row: keys [lo, hi) with hi = min(kv_len, pages * page_size, causal ? pos + 1 :
// kv_len), lo = window ? pos - window + 1 : 0. A row that sees no key writes zeros.
#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/graph.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/arrival_counters.h"
#include "dspark/backend/cuda/kernels/attention.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/op_profile.h"

namespace dspark::cuda {
namespace {

using device::FloatKind;

using attn::AttentionArgs;
using attn::CtaQueries;
using attn::kLog2e;
using attn::kMaxRows;
using attn::kMaxSplits;
using attn::row_of_token;

// Query tiles the merge's arrival counters cover; a split launch with more tiles (rare: splits
// are chosen only when the tiles alone cannot fill the GPU) uses the combine kernel.
constexpr size_t kMergeTiles = 4096;
// Query rows of a tile up to which its last split CTA merges them instead of the combine kernel:
// 4 (one per warp: decode) unless the environment says otherwise - DSPARK_ATTN_MERGE=0 gives 0
// (always the combine kernel), DSPARK_ATTN_MERGE_ROWS=N gives N (16: every tile) - or
// set_attention_merge_rows was called.
std::atomic<int>& merge_rows_flag() {
  static std::atomic<int> rows = [] {
    if (!env_switch("DSPARK_ATTN_MERGE", true)) return 0;
    const char* v = std::getenv("DSPARK_ATTN_MERGE_ROWS");
    return v != nullptr && *v != '\0' ? std::clamp(std::atoi(v), 0, attn::kMaxRows) : 4;
  }();
  return rows;
}
// The tensor-core kernel's decode variant (attention_mma.cu): 2 = early (K/V copies before the PDL
// wait, merge through shared memory; the default since 2026-11-30: bench_attention decode at 1k
// 13.9 -> 9.2 us, 16k 42.9 -> 32.0 us on the H200), 1 = the previous path (DSPARK_ATTN_DECODE=1,
// read once, or set_attention_decode(1)).
std::atomic<int>& decode_variant_flag() {
  static std::atomic<int> variant = [] {
    const char* v = std::getenv("DSPARK_ATTN_DECODE");
    return v != nullptr && std::atoi(v) == 1 ? 1 : 2;
  }();
  return variant;
}

// The tensor-core kernel's cluster variant (attention_mma.cu): on by default;
// DSPARK_ATTN_CLUSTER=0 (read once) or set_attention_cluster(false) turns it off.
std::atomic<int>& cluster_flag() {
  static std::atomic<int> on = env_switch("DSPARK_ATTN_CLUSTER", true) ? 1 : 0;
  return on;
}
// Whether a split launch whose query tiles have `tile_rows` rows is merged by clusters: the
// variant is on, the GPU runs the sm_90a code (the build's other target, compute_80 PTX, has no
// clusters) and the row policy (merge_rows_flag) leaves such tiles to the combine kernel.
// paged_attention_splits caps those launches at kMaxClusterSplits, on either kernel (it does not
// know the dtype or head_dim): the launch and a graph's key then agree.
bool cluster_merge(int64_t tile_rows) {
  return cluster_flag().load() != 0 && tile_rows > merge_rows_flag().load() && compute_major() == 9;
}
// Balanced split counts for cluster-merged launches (paged_attention_splits): on by default;
// DSPARK_ATTN_BALANCED_SPLITS=0 (read once) or set_attention_balanced_splits(false) keeps the CTA
// target's count.
std::atomic<int>& balanced_flag() {
  static std::atomic<int> on = env_switch("DSPARK_ATTN_BALANCED_SPLITS", true) ? 1 : 0;
  return on;
}

// The row-warp tensor-core kernel (attention_rows.cu) for query tiles of several tokens per
// request (n_tokens >= 2 n_rows: verify, draft blocks, prefill) of at least `min_requests`
// requests: its key groups per m16 tile (1, 2 or 4; 0 = off, the tiles of attention_mma.cu).
// Opt-in: DSPARK_ATTN_ROWS=1/2/4 (read once) or set_attention_rows. H200, Qwen3-8B shape,
// session 15, graphed, verify of 16 drafts (17 queries) per request, attention_mma.cu against the
// row-warp kernel with 1 / 2 / 4 key groups (bench_attention, us):
//   one request, 1k context: 13.3 against 17.4 / 13.9 / 22.8 (4k: 30.0 against 38.2 / 48.2 / 45.1);
//   two requests, 1k: 30.0 against 21.6 / 40.3 (4k: 77.9 against 76.7 / 95.7);
//   four requests, 1k: 48.0-48.1 against 42.8-42.9 / 73.0 / 65.5 (4k: 146.2 against 116.6);
//   four requests of 33 queries, 1k: 76.0 against 104.6;
// but in bench_round's graphed verify of 16 drafts at batch 4 (1 key group, 4 or more requests)
// 7.133 ms against 7.016, and at batch 1 (every request) 5.530 against 5.385: slower in the
// forward, hence off. DSPARK_ATTN_ROWS_MIN_REQUESTS=N (set_attention_rows_min_requests) sets the
// fewest requests (4 by default: where it won alone). DSPARK_ATTN_ROWS_TOKENS=N
// (set_attention_rows_tokens) caps its tokens per CTA (0: rows_tiling's choice).
constexpr int kDefaultRowsKeyGroups = 0;
constexpr int kDefaultRowsMinRequests = 4;
std::atomic<int>& rows_flag() {
  static std::atomic<int> key_groups = [] {
    const char* v = std::getenv("DSPARK_ATTN_ROWS");
    if (v == nullptr || *v == '\0') return kDefaultRowsKeyGroups;
    const int n = std::atoi(v);
    return n == 1 || n == 2 || n == 4 ? n : 0;
  }();
  return key_groups;
}
std::atomic<int>& rows_min_requests_flag() {
  static std::atomic<int> n = env_count("DSPARK_ATTN_ROWS_MIN_REQUESTS", kDefaultRowsMinRequests);
  return n;
}
std::atomic<int>& rows_tokens_flag() {
  static std::atomic<int> tokens = env_count("DSPARK_ATTN_ROWS_TOKENS", 0);
  return tokens;
}
// Whether a launch of n_tokens queries over n_rows requests takes the row-warp kernel's tiling
// (the kernel itself still needs a 16-bit cache and head_dim 64 / 128; otherwise attention_mma.cu
// or the CUDA-core kernel runs on that tiling's split count: correct, if not tuned for them).
// Off with the tensor-core kernels (set_mma_attention(false)).
bool rows_path(int64_t n_tokens, int64_t n_rows) {
  return rows_flag().load() != 0 && n_tokens >= 2 * n_rows &&
         n_rows >= rows_min_requests_flag().load() && mma_attention_enabled();
}
// Whether the row-warp kernel merges its splits in clusters (sm_90, the cluster variant on): it
// has no arrival-counter merge, so otherwise the combine kernel does.
bool rows_cluster() {
  return cluster_flag().load() != 0 && compute_major() == 9;
}

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;
static_assert(kWarps * kRowsPerWarp == kMaxRows);
constexpr int kKeyTile = 32;
constexpr int kMaxHeadDim = 256;

// ---- kv_write --------------------------------------------------------------------------------

template <typename TP>
struct KvWriteParams {
  const void* k;  // [n, n_kv_heads, head_dim]
  const void* v;
  FloatKind k_kind, v_kind;
  int64_t k_stride_token, k_stride_head, v_stride_token, v_stride_head;
  const int32_t* slots;  // [n]
  TP* k_pages;           // [n_pages, page_size, n_kv_heads, head_dim]
  TP* v_pages;
  int64_t page_stride, slot_stride, head_stride;  // of the pages (same for K and V)
  int page_size;
  int n_kv_heads;
  int head_dim;
};

template <typename TP>
__global__ void kv_write_kernel(KvWriteParams<TP> p) {
  const int64_t i = blockIdx.x;
  const int32_t slot = p.slots[i];
  if (slot < 0) return;  // padding
  const int64_t base = static_cast<int64_t>(slot / p.page_size) * p.page_stride +
                       static_cast<int64_t>(slot % p.page_size) * p.slot_stride;
  const int n = p.n_kv_heads * p.head_dim;
  for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
    const int h = idx / p.head_dim, d = idx - h * p.head_dim;
    const int64_t dst = base + h * p.head_stride + d;
    p.k_pages[dst] = device::from_float<TP>(
        device::load_float(p.k, i * p.k_stride_token + h * p.k_stride_head + d, p.k_kind));
    p.v_pages[dst] = device::from_float<TP>(
        device::load_float(p.v, i * p.v_stride_token + h * p.v_stride_head + d, p.v_kind));
  }
}

// ---- paged_attention -------------------------------------------------------------------------

template <int NC>
constexpr size_t attention_smem_bytes() {
  constexpr int kD = NC * 32;
  return sizeof(float) * (kMaxRows * kD + kKeyTile * (kD + 1) + kKeyTile * kD);
}

// Loads the K and V rows of a key tile into shared memory as f32 (columns >= head_dim untouched).
template <typename TKV, int NC>
__device__ void load_kv_tile(const AttentionArgs<TKV>& p, const int64_t* key_off, float* s_k,
                             float* s_v) {
  constexpr int kD = NC * 32;
  if (p.vec_kv) {
    constexpr int kW = device::kVecWidth<TKV>;
    const int vecs = p.head_dim / kW;
    for (int idx = threadIdx.x; idx < kKeyTile * vecs; idx += kThreads) {
      const int jj = idx / vecs, d0 = (idx - jj * vecs) * kW;
      const int64_t off = key_off[jj];
      float kv[kW], vv[kW];
      if (off >= 0) {
        device::load_vec(p.k_pages + off + d0, kv);
        device::load_vec(p.v_pages + off + d0, vv);
      } else {
#pragma unroll
        for (int w = 0; w < kW; ++w) kv[w] = vv[w] = 0.0f;
      }
#pragma unroll
      for (int w = 0; w < kW; ++w) {
        s_k[jj * (kD + 1) + d0 + w] = kv[w];
        s_v[jj * kD + d0 + w] = vv[w];
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < kKeyTile * p.head_dim; idx += kThreads) {
      const int jj = idx / p.head_dim, d = idx - jj * p.head_dim;
      const int64_t off = key_off[jj];
      s_k[jj * (kD + 1) + d] = off >= 0 ? device::to_float(p.k_pages[off + d]) : 0.0f;
      s_v[jj * kD + d] = off >= 0 ? device::to_float(p.v_pages[off + d]) : 0.0f;
    }
  }
}

template <typename TKV, int NC>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(AttentionArgs<TKV> p) {
  constexpr int kD = NC * 32;  // head_dim padded to whole warps
  extern __shared__ float smem[];
  float* s_q = smem;                       // [kMaxRows][kD], scaled, zero padded
  float* s_k = s_q + kMaxRows * kD;        // [kKeyTile][kD + 1]
  float* s_v = s_k + kKeyTile * (kD + 1);  // [kKeyTile][kD]
  __shared__ int s_lo[kMaxRows], s_hi[kMaxRows];
  __shared__ int64_t s_key_off[kKeyTile];
  __shared__ int s_row, s_seg_end, s_kmin, s_kmax;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const CtaQueries cq = cta_queries(p);
  const int kv_head = cq.kv_head, h_begin = cq.h_begin, nh = cq.nh, split = cq.split;
  const int t_end = cq.t_end;
  int t = cq.t_begin;

  // Padding columns of K and V stay zero (q is zero there too, but must not meet NaN garbage).
  for (int idx = threadIdx.x; idx < kKeyTile * (2 * kD + 1); idx += kThreads) s_k[idx] = 0.0f;

  while (t < t_end) {
    __syncthreads();  // the previous segment is done with the shared arrays
    if (threadIdx.x == 0) {
      const int r = row_of_token(p.q_indptr, p.n_rows, t);
      s_row = r;
      s_seg_end = min(t_end, p.q_indptr[r + 1]);
    }
    __syncthreads();
    const int row = s_row, seg_end = s_seg_end;
    if (seg_end <= t) break;  // malformed q_indptr: never loop forever
    const int n_q = (seg_end - t) * nh;

    if (threadIdx.x < n_q) {
      const int i = threadIdx.x;
      const int pos = p.q_pos[t + i / nh];
      const int n_pages = p.page_indptr[row + 1] - p.page_indptr[row];
      int hi = min(p.kv_lens[row], n_pages * p.page_size);
      if (p.causal) hi = min(hi, pos + 1);
      const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
      s_lo[i] = lo;
      s_hi[i] = max(hi, lo);
    }
    for (int idx = threadIdx.x; idx < kMaxRows * kD; idx += kThreads) {
      const int i = idx / kD, d = idx - i * kD;
      float v = 0.0f;
      if (i < n_q && d < p.head_dim) {
        const int64_t tok = t + i / nh, h = h_begin + i % nh;
        v = device::load_float(p.q, tok * p.q_stride_token + h * p.q_stride_head + d, p.q_kind) *
            p.scale;
      }
      s_q[idx] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int kmin = INT32_MAX, kmax = 0;
      for (int i = 0; i < n_q; ++i) {
        if (s_hi[i] > s_lo[i]) {
          kmin = min(kmin, s_lo[i]);
          kmax = max(kmax, s_hi[i]);
        }
      }
      s_kmin = kmin < kmax ? kmin : 0;
      s_kmax = kmin < kmax ? kmax : 0;
    }
    __syncthreads();
    const int kmin = s_kmin, kmax = s_kmax;
    const int32_t* row_pages = p.page_indices + p.page_indptr[row];

    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][NC];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      m[rr] = -INFINITY;
      l[rr] = 0.0f;
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[rr][c] = 0.0f;
    }

    const int n_tiles = (kmax - kmin + kKeyTile - 1) / kKeyTile;
    for (int tile = split; tile < n_tiles; tile += p.n_splits) {
      const int key0 = kmin + tile * kKeyTile;
      if (threadIdx.x < kKeyTile) {
        const int j = key0 + threadIdx.x;
        int64_t off = -1;
        if (j < kmax) {
          off = static_cast<int64_t>(row_pages[j / p.page_size]) * p.page_stride +
                static_cast<int64_t>(j % p.page_size) * p.slot_stride +
                static_cast<int64_t>(kv_head) * p.head_stride;
        }
        s_key_off[threadIdx.x] = off;
      }
      __syncthreads();
      load_kv_tile<TKV, NC>(p, s_key_off, s_k, s_v);
      __syncthreads();

#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int i = warp + rr * kWarps;
        if (i >= n_q) break;
        const int lo = s_lo[i], hi = s_hi[i];
        if (lo >= hi || hi <= key0 || lo >= key0 + kKeyTile) continue;  // no visible key here
        const float* q_row = s_q + i * kD;
        const float* k_row = s_k + lane * (kD + 1);
        float s = 0.0f;
#pragma unroll 16
        for (int d = 0; d < kD; ++d) s += q_row[d] * k_row[d];
        if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
        const int j = key0 + lane;
        const bool visible = j >= lo && j < hi;
        s = visible ? s * kLog2e : -INFINITY;
        const float m_new = fmaxf(m[rr], device::warp_max(s));  // finite: a key is visible
        const float alpha = exp2f(m[rr] - m_new);               // 0 on the first visible tile
        const float w = visible ? exp2f(s - m_new) : 0.0f;
        l[rr] = l[rr] * alpha + device::warp_sum(w);
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[rr][c] *= alpha;
#pragma unroll 8
        for (int jj = 0; jj < kKeyTile; ++jj) {
          const float wj = __shfl_sync(device::kFullMask, w, jj);
          const float* v_row = s_v + jj * kD + lane;
#pragma unroll
          for (int c = 0; c < NC; ++c) acc[rr][c] += wj * v_row[32 * c];
        }
        m[rr] = m_new;
      }
      __syncthreads();
    }

#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int i = warp + rr * kWarps;
      if (i >= n_q) break;
      const int64_t tok = t + i / nh, h = h_begin + i % nh;
      if (p.n_splits == 1) {
        const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
        const int64_t base = tok * p.out_stride_token + h * p.out_stride_head;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          if (d < p.head_dim) device::store_float(p.out, base + d, p.out_kind, acc[rr][c] * inv);
        }
      } else {
        float* part = p.part + ((tok * p.n_heads + h) * p.n_splits + split) * (p.head_dim + 2);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          if (d < p.head_dim) part[d] = acc[rr][c];
        }
        if (lane == 0) {
          part[p.head_dim] = m[rr];
          part[p.head_dim + 1] = l[rr];
        }
      }
    }
    t = seg_end;
  }
  if (p.n_splits > 1 && p.counters != nullptr) attn::merge_splits_if_last(p, cq, smem);
}

struct CombineArgs {
  const float* part;  // [n_tokens * n_heads, n_splits, head_dim + 2]
  void* out;
  FloatKind out_kind;
  int64_t out_stride_token, out_stride_head;
  int64_t n_items;  // n_tokens * n_heads
  int n_heads, n_splits, head_dim;
};

// One warp per (token, head): merges the splits' partial softmax states (the path without
// arrival counters).
__global__ void combine_splits_kernel(CombineArgs p) {
  pdl_wait();  // launched as a programmatic dependent of the attention kernel
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (item >= p.n_items) return;
  const int64_t tok = item / p.n_heads, h = item - tok * p.n_heads;
  attn::merge_split_item(p.part + item * p.n_splits * (p.head_dim + 2), p.n_splits, p.head_dim,
                         p.out, p.out_kind, tok * p.out_stride_token + h * p.out_stride_head,
                         static_cast<int>(threadIdx.x & 31));
}

template <typename TKV, int NC>
void launch_attention(Context& ctx, const AttentionArgs<TKV>& args, dim3 grid) {
  constexpr size_t kSmem = attention_smem_bytes<NC>();
  static_assert(kSmem >= attn::kMergeSmemBytes, "the split merge reuses the dynamic smem");
  if constexpr (kSmem > 48 * 1024) {
    DSPARK_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<TKV, NC>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(kSmem)));
  }
  paged_attention_kernel<TKV, NC><<<grid, kThreads, kSmem, stream_of(ctx)>>>(args);
  DSPARK_CUDA_CHECK_LAUNCH();
}

// The CTA tiling of the query rows (see the file comment).
struct QueryTiling {
  int64_t heads_per_cta, tokens_per_cta, head_chunks, grid_x, grid_y;
  int64_t tile_rows;  // query rows of a full tile: min(tokens_per_cta, n_tokens) x heads_per_cta
};

// The row-warp kernel's tiling (attention_rows.cu): at most 8 warps = m16 tiles x key groups,
// so 128 / key_groups rows per CTA; heads of one KV head x tokens, the tokens of a request
// spread evenly over the fewest CTAs that hold them (one CTA per request and KV head for a
// verify of 16 drafts: 17 tokens x 4 heads = 68 rows, 5 m16 tiles).
struct RowsTiling {
  QueryTiling q;
  int warps, key_groups;
};
RowsTiling rows_tiling(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t n_rows) {
  RowsTiling r{};
  r.key_groups = std::max(1, rows_flag().load());
  const int64_t rows_max = 16 * (8 / r.key_groups);
  QueryTiling& t = r.q;
  const int64_t group = n_heads / n_kv_heads;
  t.heads_per_cta = std::min<int64_t>(group, rows_max);
  const int64_t tokens_max = std::max<int64_t>(1, rows_max / t.heads_per_cta);
  const int64_t per_row = ceil_div(n_tokens, std::max<int64_t>(1, n_rows));
  t.tokens_per_cta = std::min(tokens_max, ceil_div(per_row, ceil_div(per_row, tokens_max)));
  if (const int cap = rows_tokens_flag().load(); cap > 0)
    t.tokens_per_cta = std::min<int64_t>(t.tokens_per_cta, cap);
  t.head_chunks = ceil_div(group, t.heads_per_cta);
  t.grid_x = ceil_div(n_tokens, t.tokens_per_cta);
  t.grid_y = n_kv_heads * t.head_chunks;
  t.tile_rows = std::min(t.tokens_per_cta, n_tokens) * t.heads_per_cta;
  r.warps = static_cast<int>(ceil_div(t.tokens_per_cta * t.heads_per_cta, 16)) * r.key_groups;
  return r;
}

QueryTiling query_tiling(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads) {
  QueryTiling t{};
  const int64_t group = n_heads / n_kv_heads;
  t.heads_per_cta = std::min<int64_t>(group, kMaxRows);
  t.tokens_per_cta = std::max<int64_t>(1, kMaxRows / t.heads_per_cta);
  t.head_chunks = ceil_div(group, t.heads_per_cta);
  t.grid_x = ceil_div(n_tokens, t.tokens_per_cta);
  t.grid_y = n_kv_heads * t.head_chunks;
  t.tile_rows = std::min(t.tokens_per_cta, n_tokens) * t.heads_per_cta;
  return t;
}

}  // namespace

// Split the keys over more CTAs when the query tiles alone cannot fill the GPU; the page count
// bounds the keys per row, so short contexts are not split into empty pieces; at most
// kMaxClusterSplits when the tiles are merged by clusters (cluster_merge); then the fewest splits
// with the same most key tiles per split (balanced_flag). (Declared in
// backend/cuda/graph.h: a captured forward is keyed by this count.)
int paged_attention_splits(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t n_rows,
                           int64_t total_pages, int64_t page_size) {
  if (n_tokens <= 0 || n_rows <= 0 || n_kv_heads <= 0) return 1;
  const bool rows = rows_path(n_tokens, n_rows);
  const QueryTiling tiling = rows ? rows_tiling(n_tokens, n_heads, n_kv_heads, n_rows).q
                                  : query_tiling(n_tokens, n_heads, n_kv_heads);
  const int64_t ctas = tiling.grid_x * tiling.grid_y;
  const int64_t target = 2 * static_cast<int64_t>(sm_count());
  int64_t n_splits = 1;
  if (ctas < target) {
    const int64_t keys_per_row = total_pages * page_size / n_rows;
    const int64_t useful = ceil_div(keys_per_row, attn::kSplitKeys);
    n_splits = std::clamp<int64_t>(std::min(ceil_div(target, ctas), useful), 1, kMaxSplits);
    if (rows ? rows_cluster() : cluster_merge(tiling.tile_rows)) {
      n_splits = std::min<int64_t>(n_splits, attn::kMaxClusterSplits);
      // The kernel deals a row's key tiles evenly over the splits; of the counts that give a CTA
      // at most as many tiles, the fewest leave fewer CTAs to merge in the cluster (a verify at
      // context 1,024: 17 tiles, 7 splits -> 6, at most 3 per CTA either way; bench_attention on
      // the H200, verify 17 at 1k: 14.5 -> 13.2-13.6 us; session 12). Not for decode tiles:
      // there it took 4k decode (65 tiles) from 32 to 22 splits, 15.2 us against 12.5-13.2.
      if (balanced_flag().load() != 0 && useful > 0)
        n_splits = ceil_div(useful, ceil_div(useful, n_splits));
    }
  }
  return static_cast<int>(n_splits);
}

void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots,
              const Tensor& k_pages, const Tensor& v_pages) {
  const int64_t n = k.size(0);
  if (n == 0) return;
  DSPARK_CHECK(k_pages.strides() == v_pages.strides() && k_pages.dtype() == v_pages.dtype(),
               "kv_write: K and V pages differ in layout");
  dispatch_float(k_pages.dtype(), [&]<typename TP>(TypeTag<TP>) {
    KvWriteParams<device_t<TP>> p{};
    p.k = k.data();
    p.v = v.data();
    p.k_kind = float_kind(k.dtype());
    p.v_kind = float_kind(v.dtype());
    p.k_stride_token = k.stride(0);
    p.k_stride_head = k.stride(1);
    p.v_stride_token = v.stride(0);
    p.v_stride_head = v.stride(1);
    p.slots = static_cast<const int32_t*>(slots.data());
    p.k_pages = device_ptr<TP>(k_pages);
    p.v_pages = device_ptr<TP>(v_pages);
    p.page_stride = k_pages.stride(0);
    p.slot_stride = k_pages.stride(1);
    p.head_stride = k_pages.stride(2);
    p.page_size = static_cast<int>(k_pages.size(1));
    p.n_kv_heads = static_cast<int>(k.size(1));
    p.head_dim = static_cast<int>(k.size(2));
    const int threads = static_cast<int>(
        std::clamp<int64_t>(ceil_div(int64_t{p.n_kv_heads} * p.head_dim, 32) * 32, 32, 256));
    kv_write_kernel<<<static_cast<unsigned>(n), threads, 0, stream_of(ctx)>>>(p);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out) {
  const int64_t n_tokens = q.size(0), n_heads = q.size(1), head_dim = q.size(2);
  const int64_t n_rows = q_indptr.numel() - 1;
  if (n_tokens == 0 || n_rows <= 0) return;
  const Tensor& kp = kv.k_pages;
  const int64_t n_kv_heads = kp.size(2), page_size = kp.size(1);
  DSPARK_CHECK_KIND(unsupported, head_dim > 0 && head_dim <= kMaxHeadDim,
                    "paged_attention on CUDA: head_dim {} (supported: 1..{})", head_dim,
                    kMaxHeadDim);
  DSPARK_CHECK(kv.v_pages.strides() == kp.strides() && kv.v_pages.dtype() == kp.dtype(),
               "paged_attention: K and V pages differ in layout");
  DSPARK_CHECK(q.stride(2) == 1 && out.stride(2) == 1, "paged_attention: head_dim not contiguous");

  const int64_t group = n_heads / n_kv_heads;
  const QueryTiling tiling = query_tiling(n_tokens, n_heads, n_kv_heads);
  const int64_t heads_per_cta = tiling.heads_per_cta;
  const int64_t tokens_per_cta = tiling.tokens_per_cta;
  const int64_t head_chunks = tiling.head_chunks;
  dim3 grid(static_cast<unsigned>(tiling.grid_x), static_cast<unsigned>(tiling.grid_y), 1);
  const int64_t n_splits = paged_attention_splits(n_tokens, n_heads, n_kv_heads, n_rows,
                                                  kv.page_indices.numel(), page_size);
  grid.z = static_cast<unsigned>(n_splits);
  float* part = nullptr;
  unsigned* counters = nullptr;  // the last split CTA of each query tile merges (no combine)
  const bool early = attention_decode() == 2;
  // The tensor-core kernel merges the splits in clusters (no combine); still allocated: the
  // CUDA-core kernel, if it runs, writes partials for the combine kernel.
  const bool cluster =
      n_splits > 1 && n_splits <= attn::kMaxClusterSplits && cluster_merge(tiling.tile_rows);
  if (n_splits > 1) {
    // Partial rows of head_dim + 2 floats (acc..., max, sum); the early variant's shared-memory
    // merge pads them to head_dim + 4 (16-byte aligned).
    const int64_t part_row = head_dim + (early ? 4 : 2);
    part = static_cast<float*>(ctx.scratch(static_cast<size_t>(n_tokens * n_heads * n_splits) *
                                           static_cast<size_t>(part_row) * sizeof(float)));
    // The last CTA merges its tile's rows after its own work: that pays when a tile has at most
    // one row per warp (decode: one token x the GQA group). For bigger tiles (verify, draft
    // blocks) a merge of the rows one after the other in each warp cost more than the combine
    // kernel (H200, Qwen3-8B shape, context 1,024: graphed verify of 16 drafts 5.75 -> 6.20 ms,
    // decode 5.11 -> 5.07 ms with the in-kernel merge for every shape); the merge of such tiles
    // is now spread over the whole CTA (attention.cuh), not timed yet: hence 4 by default.
    const int64_t tile_rows = tiling.tile_rows;
    if (!cluster && tile_rows <= attention_merge_rows() &&
        int64_t{grid.x} * grid.y <= static_cast<int64_t>(kMergeTiles))
      counters = arrival_counters(ctx, ArrivalPool::attention_merge, kMergeTiles);
  }

  bool cluster_merged = false;  // the tensor-core kernel's cluster variant ran: no combine
  bool combine = n_splits > 1 && counters == nullptr;  // the combine kernel merges the splits
  dispatch_float(kp.dtype(), [&]<typename TKV>(TypeTag<TKV>) {
    using DKV = device_t<TKV>;
    AttentionArgs<DKV> a{};
    a.q = q.data();
    a.q_kind = float_kind(q.dtype());
    a.q_stride_token = q.stride(0);
    a.q_stride_head = q.stride(1);
    a.out = out.data();
    a.out_kind = float_kind(out.dtype());
    a.out_stride_token = out.stride(0);
    a.out_stride_head = out.stride(1);
    a.k_pages = device_ptr<TKV>(kp);
    a.v_pages = device_ptr<TKV>(kv.v_pages);
    a.page_stride = kp.stride(0);
    a.slot_stride = kp.stride(1);
    a.head_stride = kp.stride(2);
    a.q_indptr = static_cast<const int32_t*>(q_indptr.data());
    a.q_pos = static_cast<const int32_t*>(q_pos.data());
    a.page_indptr = static_cast<const int32_t*>(kv.page_indptr.data());
    a.page_indices = static_cast<const int32_t*>(kv.page_indices.data());
    a.kv_lens = static_cast<const int32_t*>(kv.kv_lens.data());
    a.n_rows = static_cast<int>(n_rows);
    a.n_tokens = static_cast<int>(n_tokens);
    a.n_heads = static_cast<int>(n_heads);
    a.group = static_cast<int>(group);
    a.head_dim = static_cast<int>(head_dim);
    a.page_size = static_cast<int>(page_size);
    a.heads_per_cta = static_cast<int>(heads_per_cta);
    a.tokens_per_cta = static_cast<int>(tokens_per_cta);
    a.head_chunks = static_cast<int>(head_chunks);
    a.scale = params.scale;
    a.softcap = params.softcap;
    a.window = params.sliding_window;
    a.causal = params.causal;
    constexpr int kW = device::kVecWidth<DKV>;
    a.vec_kv = device::is_aligned16(a.k_pages) && device::is_aligned16(a.v_pages) &&
               head_dim % kW == 0 && a.page_stride % kW == 0 && a.slot_stride % kW == 0 &&
               a.head_stride % kW == 0;
    a.n_splits = static_cast<int>(n_splits);
    a.part = part;
    a.counters = counters;
    a.early = early;
    a.cluster = cluster && counters == nullptr;
    if (rows_path(n_tokens, n_rows)) {  // the row-warp kernel when it fits, on its own tiling
      const RowsTiling rt = rows_tiling(n_tokens, n_heads, n_kv_heads, n_rows);
      AttentionArgs<DKV> r = a;
      r.heads_per_cta = static_cast<int>(rt.q.heads_per_cta);
      r.tokens_per_cta = static_cast<int>(rt.q.tokens_per_cta);
      r.head_chunks = static_cast<int>(rt.q.head_chunks);
      r.counters = nullptr;
      r.cluster = n_splits > 1 && n_splits <= attn::kMaxClusterSplits && rows_cluster();
      const dim3 rgrid(static_cast<unsigned>(rt.q.grid_x), static_cast<unsigned>(rt.q.grid_y),
                       static_cast<unsigned>(n_splits));
      if (attn::launch_attention_rows<DKV>(ctx, r, rgrid, rt.warps, rt.key_groups)) {
        combine = n_splits > 1 && !r.cluster;
        return;
      }
    }
    if (attn::launch_attention_mma<DKV>(ctx, a, grid)) {  // tensor cores when they fit
      cluster_merged = a.cluster;
      return;
    }
    if (head_dim <= 32)
      launch_attention<DKV, 1>(ctx, a, grid);
    else if (head_dim <= 64)
      launch_attention<DKV, 2>(ctx, a, grid);
    else if (head_dim <= 128)
      launch_attention<DKV, 4>(ctx, a, grid);
    else
      launch_attention<DKV, 8>(ctx, a, grid);
  });

  if (combine && !cluster_merged) {
    CombineArgs c{part,
                  out.data(),
                  float_kind(out.dtype()),
                  out.stride(0),
                  out.stride(1),
                  n_tokens * n_heads,
                  static_cast<int>(n_heads),
                  static_cast<int>(n_splits),
                  static_cast<int>(head_dim)};
    constexpr int kCombineWarps = 4;
    const OpProfileScope profile(ctx, "paged_attention_combine()");  // also inside paged_attention
    launch_pdl(combine_splits_kernel,
               dim3(static_cast<unsigned>(ceil_div(c.n_items, kCombineWarps))),
               dim3(kCombineWarps * 32), 0, stream_of(ctx), c);
  }
}

void set_attention_merge_rows(int rows) {
  merge_rows_flag().store(std::clamp(rows, 0, attn::kMaxRows));
}

int attention_merge_rows() {
  return merge_rows_flag().load();
}

void set_attention_decode(int variant) {
  decode_variant_flag().store(variant == 2 ? 2 : 1);
}

int attention_decode() {
  return decode_variant_flag().load();
}

void set_attention_cluster(bool enabled) {
  cluster_flag().store(enabled ? 1 : 0);
}

bool attention_cluster() {
  return cluster_flag().load() != 0;
}

void set_attention_rows(int key_groups) {
  rows_flag().store(key_groups == 1 || key_groups == 2 || key_groups == 4 ? key_groups : 0);
}

int attention_rows() {
  return rows_flag().load();
}

void set_attention_rows_min_requests(int requests) {
  rows_min_requests_flag().store(std::max(0, requests));
}

int attention_rows_min_requests() {
  return rows_min_requests_flag().load();
}

void set_attention_rows_tokens(int tokens) {
  rows_tokens_flag().store(std::max(0, tokens));
}

void set_attention_balanced_splits(bool enabled) {
  balanced_flag().store(enabled ? 1 : 0);
}

bool attention_balanced_splits() {
  return balanced_flag().load() != 0;
}

}  // namespace dspark::cuda
