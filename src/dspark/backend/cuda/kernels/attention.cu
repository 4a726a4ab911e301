// kv_write and paged_attention (contract: ops/attention.h).
//
// paged_attention runs on tensor cores when the call fits (16-bit caches, head_dim 64 / 128 / 256,
// and 576 where the V pages are the K pages, MLA's absorbed form: attention_mma.cu) and otherwise
// on this flash-decoding-style kernel on CUDA cores (head_dim up to 576: a latent of 512 and a
// rope key of 64 needs 180 KB of shared memory per CTA, which sm_90 allows); the choice,
// the tiling, the key splits and their merge are plan_attention's (policy/attention.h):
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
//    arrival counter per query tile) for tiles of at most Tuning::attention_merge_rows rows
//    (decode), by a thread-block cluster of the tile's split CTAs in the tensor-core kernel on
//    sm_90 (attention_mma.cu), else by a separate combine kernel.
// Masking per query row: keys [lo, hi) with hi = min(kv_len, pages * page_size, causal ? pos + 1 :
// kv_len), lo = window ? pos - window + 1 : 0. A row that sees no key writes zeros.
#include <algorithm>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/arrival_counters.h"
#include "dspark/backend/cuda/kernels/attention.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/policy/attention.h"
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

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 4;
static_assert(kWarps * kRowsPerWarp == kMaxRows);
constexpr int kKeyTile = 32;
constexpr int kMaxHeadDim = 576;

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
        attn::online_softmax_tile<NC, kKeyTile>(s, visible, m[rr], l[rr], acc[rr], s_v, kD, lane);
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
    const int optin = max_optin_smem();
    DSPARK_CHECK_KIND(unsupported, kSmem <= static_cast<size_t>(optin),
                      "paged_attention on CUDA: head_dim {} needs {} KB of shared memory per block "
                      "on CUDA cores; this GPU allows {} KB",
                      args.head_dim, kSmem / 1024, optin / 1024);
    allow_dynamic_smem<&paged_attention_kernel<TKV, NC>>(kSmem);
  }
  paged_attention_kernel<TKV, NC><<<grid, kThreads, kSmem, stream_of(ctx)>>>(args);
  DSPARK_CUDA_CHECK_LAUNCH();
}

// Whether the tensor-core kernel can take the call (policy/attention.h): q and the pages 16-byte
// aligned with strides of whole 8-element vectors; V pages that are the K pages (MLA's latent).
bool tensor_core_fits(const Tensor& q, const Tensor& k_pages, const Tensor& v_pages,
                      int64_t head_dim) {
  const bool aligned = device::is_aligned16(q.data()) && q.stride(0) % 8 == 0 &&
                       q.stride(1) % 8 == 0 && device::is_aligned16(k_pages.data()) &&
                       device::is_aligned16(v_pages.data()) && head_dim % 8 == 0 &&
                       k_pages.stride(0) % 8 == 0 && k_pages.stride(1) % 8 == 0 &&
                       k_pages.stride(2) % 8 == 0;
  const bool shared_kv = k_pages.data() == v_pages.data();
  return attention_on_tensor_cores(k_pages.dtype(), q.dtype(), head_dim, aligned, shared_kv);
}

}  // namespace

int paged_attention_splits(const Context& ctx, int64_t n_tokens, int64_t n_heads,
                           int64_t n_kv_heads, int64_t n_rows, int64_t total_pages,
                           int64_t page_size) {
  const AttentionShape shape{n_tokens, n_heads, n_kv_heads, 0, n_rows, total_pages, page_size};
  return attention_splits(shape, ctx.cuda_caps(), ctx.cuda_tuning());
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
  const AttentionShape shape{
      n_tokens, n_heads, n_kv_heads, head_dim, n_rows, kv.page_indices.numel(), page_size};
  const AttentionPlan plan = plan_attention(shape, tensor_core_fits(q, kp, kv.v_pages, head_dim),
                                            ctx.cuda_caps(), ctx.cuda_tuning());
  const QueryTiling& tiling = plan.tiling;
  const int64_t n_splits = plan.n_splits;
  const dim3 grid(static_cast<unsigned>(tiling.grid_x), static_cast<unsigned>(tiling.grid_y),
                  static_cast<unsigned>(n_splits));
  float* part = nullptr;
  unsigned* counters = nullptr;  // the last split CTA of each query tile merges (no combine)
  if (n_splits > 1) {
    // Partial rows of head_dim + 2 floats (acc..., max, sum); the tensor-core kernel's
    // shared-memory merge pads them to head_dim + 4 (16-byte aligned). Allocated for every split
    // launch (also cluster-merged ones, which write none), so that the scratch buffer a captured
    // graph bakes in does not depend on the merge.
    const int64_t part_row = head_dim + 4;
    part = static_cast<float*>(ctx.scratch(static_cast<size_t>(n_tokens * n_heads * n_splits) *
                                           static_cast<size_t>(part_row) * sizeof(float)));
    // Null when first used inside a graph capture: the combine kernel merges then.
    if (plan.merge == SplitMerge::last_cta)
      counters = arrival_counters(ctx, ArrivalPool::attention_merge,
                                  static_cast<size_t>(kAttentionMergeTiles));
  }
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
    a.heads_per_cta = static_cast<int>(tiling.heads_per_cta);
    a.tokens_per_cta = static_cast<int>(tiling.tokens_per_cta);
    a.head_chunks = static_cast<int>(tiling.head_chunks);
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
    a.cluster = plan.merge == SplitMerge::cluster;
    if (plan.kernel == AttentionKernel::tensor_core)
      return attn::launch_attention_mma<DKV>(ctx, a, grid);
    if (head_dim <= 32)
      launch_attention<DKV, 1>(ctx, a, grid);
    else if (head_dim <= 64)
      launch_attention<DKV, 2>(ctx, a, grid);
    else if (head_dim <= 128)
      launch_attention<DKV, 4>(ctx, a, grid);
    else if (head_dim <= 256)
      launch_attention<DKV, 8>(ctx, a, grid);
    else
      launch_attention<DKV, kMaxHeadDim / 32>(ctx, a, grid);
  });

  // The combine kernel merges what no kernel did (a last-CTA merge without counters too).
  const bool combine = plan.merge == SplitMerge::combine ||
                       (plan.merge == SplitMerge::last_cta && counters == nullptr);
  if (combine) {
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

}  // namespace dspark::cuda
