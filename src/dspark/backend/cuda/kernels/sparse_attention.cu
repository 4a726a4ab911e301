// index_topk and sparse_paged_attention (contract: ops/sparse_attention.h): DeepSeek sparse
// attention (GLM-5). Both work query by query, with a fixed order of operations per query, so a
// query's result does not depend on the batch around it (batch-invariant as they are, --exact
// included). Neither syncs with the host; index_topk's scratch (ctx.scratch) depends on the shape
// only, so it grows on a graph's eager first run, never in a capture.
//
// index_topk. The exact top-k under the total order (score descending, position ascending) is
// unique, so it is computed in parts and merged without changing the result:
//  - index_topk_kernel: a CTA of 256 threads per (query, key split) scores its split's keys, a
//    tile of 256 consecutive positions at a time, one key per thread (the query's heads and head
//    weights as f32 in shared memory; score = scale * sum_h w_h relu(q_h . k), heads summed in
//    order), and streams them through a TopkBuffer. The CPU sums each dot product in another
//    order, so keys whose scores are within rounding of the k-th may be chosen differently;
//  - a TopkBuffer (shared memory) holds candidates in ascending position. Scores are compared as
//    order-preserving u32 keys. Once the buffer has been cut to k entries, the k-th best key is a
//    threshold: a later candidate (a higher position) enters only with a strictly larger key, so
//    ties keep the lower positions. When the buffer fills, it is cut back to its k best: a radix
//    select (4 passes of 8 bits, shared-memory histograms) finds the k-th largest key and how
//    many entries equal to it are kept, then one ordered pass (block-wide prefix sums) keeps the
//    keys above it and the first `need` equal ones, in place and in order;
//  - with one split, the CTA writes the ids (ascending, -1 padded); with several (few queries:
//    topk_splits), each split writes its <= k candidates to scratch and
//    index_topk_merge_kernel streams the splits' lists, in split order (so still ascending
//    positions), through the same buffer. The number of splits changes where work happens, never
//    the result.
//
// sparse_paged_attention: a CTA (4 warps) per (query, up to 16 heads) walks the query's ids in
// tiles of 32, gathers the K and V rows of the tile through the page table into shared memory as
// f32 (an id < 0 gives a zero row that is masked out), and runs the online softmax of
// paged_attention's CUDA-core kernel (attention.cu): lane j scores key j, base-2 exponentials of
// log2e-scaled scores, f32 state, P.V with lanes over the value columns. A query with no key
// writes zeros.
#include <algorithm>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/attention.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

using device::FloatKind;

// ---- index_topk ------------------------------------------------------------------------------

constexpr int kTopkThreads = 256;
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kHeadGroup = 8;       // heads whose dot products a thread accumulates at once
constexpr int kMaxTopkSplits = 32;  // key splits per query

// f32 -> u32 with the same order (larger score, larger key). Both zeros map to +0's key: the CPU
// compares floats, for which -0 == +0 is a tie.
__device__ __forceinline__ uint32_t order_key(float s) {
  const uint32_t u = s == 0.0f ? 0u : __float_as_uint(s);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of v over the block in thread order; `total` gets the block's sum. Called
// by every thread; s_warp holds kTopkWarps ints.
__device__ __forceinline__ int block_exclusive_scan(int v, int* s_warp, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(device::kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();  // a previous scan may still be reading s_warp
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  int before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kTopkWarps; ++w) {
    const int c = s_warp[w];
    if (w < warp) before += c;
    total += c;
  }
  return before + incl - v;
}

// A TopkBuffer's bookkeeping, in shared memory.
struct TopkShared {
  unsigned hist[256];
  int warp[kTopkWarps];
  int count, has_threshold, digit, remaining;
  uint32_t threshold;
};

// The best k candidates seen so far, in ascending position (see the file comment). Every member
// function is called by all threads of the block.
class TopkBuffer {
 public:
  // key / pos: `capacity` entries of shared memory each; capacity >= k + kTopkThreads.
  __device__ TopkBuffer(TopkShared& shared, uint32_t* key, int32_t* pos, int capacity, int k)
      : s_(shared), key_(key), pos_(pos), capacity_(capacity), k_(k) {
    if (threadIdx.x == 0) {
      s_.count = 0;
      s_.has_threshold = 0;
      s_.threshold = 0;
    }
    __syncthreads();
  }

  // Offers one tile: thread i's candidate (if `valid`) follows thread i - 1's in position.
  __device__ void offer(bool valid, uint32_t key, int32_t pos) {
    if (s_.count > capacity_ - kTopkThreads) cut_to_k();
    const int base = s_.count;
    const bool take = valid && (s_.has_threshold == 0 || key > s_.threshold);
    int total = 0;
    const int at = block_exclusive_scan(take ? 1 : 0, s_.warp, total);
    if (take) {
      key_[base + at] = key;
      pos_[base + at] = pos;
    }
    __syncthreads();
    if (threadIdx.x == 0) s_.count = base + total;
    __syncthreads();
  }

  // Cuts the buffer to its k best (if it holds more) and returns how many it holds.
  __device__ int finish() {
    if (s_.count > k_) cut_to_k();
    return s_.count;
  }
  __device__ const uint32_t* keys() const { return key_; }
  __device__ const int32_t* positions() const { return pos_; }

 private:
  // Keeps the k best of the m > k entries, in order; the k-th best key becomes the threshold.
  __device__ void cut_to_k() {
    const int m = s_.count;
    // Radix select of the k-th largest key: digits from the top, each pass counting the entries
    // that share the digits chosen so far.
    uint32_t prefix = 0, mask = 0;
    int remaining = k_;  // how many of the entries matching `prefix` are still to be kept
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += kTopkThreads) s_.hist[i] = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < m; i += kTopkThreads) {
        const uint32_t key = key_[i];
        if ((key & mask) == prefix) atomicAdd(&s_.hist[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int above = 0, digit = 255;
        for (; digit > 0; --digit) {
          const int c = static_cast<int>(s_.hist[digit]);
          if (above + c >= remaining) break;
          above += c;
        }
        s_.digit = digit;
        s_.remaining = remaining - above;
      }
      __syncthreads();
      prefix |= static_cast<uint32_t>(s_.digit) << shift;
      mask |= 255u << shift;
      remaining = s_.remaining;
    }
    const uint32_t threshold = prefix;
    const int need = remaining;  // entries equal to the threshold to keep: the first ones
    // Ordered in-place compaction, a tile at a time: a tile's entries are all read before any of
    // them is written (the scans' barriers), and writes never pass the tile's end.
    int kept = 0, equal_seen = 0;
    for (int base = 0; base < m; base += kTopkThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const bool in = i < m;
      const uint32_t key = in ? key_[i] : 0u;
      const int32_t pos = in ? pos_[i] : 0;
      const bool equal = in && key == threshold;
      int equal_total = 0;
      const int equal_rank = equal_seen + block_exclusive_scan(equal ? 1 : 0, s_.warp, equal_total);
      const bool keep = (in && key > threshold) || (equal && equal_rank < need);
      int keep_total = 0;
      const int at = block_exclusive_scan(keep ? 1 : 0, s_.warp, keep_total);
      if (keep) {
        key_[kept + at] = key;
        pos_[kept + at] = pos;
      }
      kept += keep_total;
      equal_seen += equal_total;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      s_.count = kept;  // == k
      s_.threshold = threshold;
      s_.has_threshold = 1;
    }
    __syncthreads();
  }

  TopkShared& s_;
  uint32_t* key_;
  int32_t* pos_;
  int capacity_, k_;
};

struct TopkArgs {
  const void* q;  // [n, heads, dim]
  FloatKind q_kind;
  int64_t q_stride_token, q_stride_head;
  const void* w;  // [n, heads]
  FloatKind w_kind;
  int64_t w_stride;
  const void* k_pages;  // [n_pages, page_size, 1, dim]
  int64_t page_stride, slot_stride;
  const int32_t* q_indptr;
  const int32_t* q_pos;
  const int32_t* page_indptr;
  const int32_t* page_indices;
  const int32_t* kv_lens;
  int32_t* ids;  // [n, k]
  // Several splits: split s of query t writes its candidates to [t * n_splits + s] of these.
  uint32_t* cand_key;   // [n * n_splits, k]
  int32_t* cand_pos;    // [n * n_splits, k]
  int32_t* cand_count;  // [n * n_splits]
  int n_rows, heads, dim, k, page_size, n_splits, capacity;
  float scale;
};

// Writes a finished buffer of `count` entries as query t's ids (-1 padded) or as its split's
// candidates.
__device__ void write_topk(const TopkArgs& p, const TopkBuffer& buf, int count, int64_t t,
                           int split, bool as_candidates) {
  if (as_candidates) {
    const int64_t slot = t * p.n_splits + split;
    for (int i = threadIdx.x; i < count; i += kTopkThreads) {
      p.cand_key[slot * p.k + i] = buf.keys()[i];
      p.cand_pos[slot * p.k + i] = buf.positions()[i];
    }
    if (threadIdx.x == 0) p.cand_count[slot] = count;
    return;
  }
  for (int i = threadIdx.x; i < p.k; i += kTopkThreads)
    p.ids[t * p.k + i] = i < count ? buf.positions()[i] : -1;
}

template <typename TK>
__global__ void __launch_bounds__(kTopkThreads) index_topk_kernel(TopkArgs p) {
  extern __shared__ float smem[];
  float* s_q = smem;                   // [heads][dim]
  float* s_w = s_q + p.heads * p.dim;  // [heads]
  auto* s_key = reinterpret_cast<uint32_t*>(s_w + p.heads);
  auto* s_pos = reinterpret_cast<int32_t*>(s_key + p.capacity);

  const int64_t t = blockIdx.x;
  const int split = static_cast<int>(blockIdx.y);
  for (int idx = threadIdx.x; idx < p.heads * p.dim; idx += kTopkThreads) {
    const int h = idx / p.dim, d = idx - h * p.dim;
    s_q[idx] = device::load_float(p.q, t * p.q_stride_token + h * p.q_stride_head + d, p.q_kind);
  }
  for (int h = threadIdx.x; h < p.heads; h += kTopkThreads)
    s_w[h] = device::load_float(p.w, t * p.w_stride + h, p.w_kind);
  __shared__ TopkShared s_top;
  TopkBuffer buf(s_top, s_key, s_pos, p.capacity, p.k);  // its constructor syncs

  const int row = attn::row_of_token(p.q_indptr, p.n_rows, static_cast<int>(t));
  const int32_t* row_pages = p.page_indices + p.page_indptr[row];
  const int n_pages = p.page_indptr[row + 1] - p.page_indptr[row];
  const int visible = max(0, min(min(p.q_pos[t] + 1, p.kv_lens[row]), n_pages * p.page_size));
  const int chunk = (visible + p.n_splits - 1) / p.n_splits;
  const int lo = min(visible, split * chunk), hi = min(visible, lo + chunk);
  const auto* pages = static_cast<const TK*>(p.k_pages);
  for (int base = lo; base < hi; base += kTopkThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    float s = 0.0f;
    if (j < hi) {
      const TK* key = pages + static_cast<int64_t>(row_pages[j / p.page_size]) * p.page_stride +
                      static_cast<int64_t>(j % p.page_size) * p.slot_stride;
      for (int h0 = 0; h0 < p.heads; h0 += kHeadGroup) {
        float acc[kHeadGroup];
#pragma unroll
        for (int g = 0; g < kHeadGroup; ++g) acc[g] = 0.0f;
        const int hn = min(kHeadGroup, p.heads - h0);
        for (int d = 0; d < p.dim; ++d) {
          const float kd = device::to_float(key[d]);
          const float* q = s_q + h0 * p.dim + d;  // the same address across the warp: a broadcast
#pragma unroll
          for (int g = 0; g < kHeadGroup; ++g)
            if (g < hn) acc[g] += q[g * p.dim] * kd;
        }
#pragma unroll
        for (int g = 0; g < kHeadGroup; ++g)
          if (g < hn) s += s_w[h0 + g] * fmaxf(0.0f, acc[g]);
      }
      s *= p.scale;
    }
    buf.offer(j < hi, order_key(s), j);
  }
  const int count = buf.finish();
  write_topk(p, buf, count, t, split, p.n_splits > 1);
}

// One CTA per query: the splits' candidate lists, in split order, through one buffer.
__global__ void __launch_bounds__(kTopkThreads) index_topk_merge_kernel(TopkArgs p) {
  extern __shared__ float smem[];
  auto* s_key = reinterpret_cast<uint32_t*>(smem);
  auto* s_pos = reinterpret_cast<int32_t*>(s_key + p.capacity);
  const int64_t t = blockIdx.x;
  __shared__ TopkShared s_top;
  TopkBuffer buf(s_top, s_key, s_pos, p.capacity, p.k);
  for (int split = 0; split < p.n_splits; ++split) {
    const int64_t slot = t * p.n_splits + split;
    const int count = p.cand_count[slot];
    for (int base = 0; base < count; base += kTopkThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const bool valid = i < count;
      buf.offer(valid, valid ? p.cand_key[slot * p.k + i] : 0u,
                valid ? p.cand_pos[slot * p.k + i] : 0);
    }
  }
  const int count = buf.finish();
  write_topk(p, buf, count, t, 0, false);
}

// The key splits per query: enough CTAs to cover every SM twice, from the number of queries and
// the GPU only (the result does not depend on it). Not from the rows' lengths, which only the
// device knows, nor from the page table's size, so that the scratch a captured graph bakes in
// (n_splits * k candidates per query) is the same for every step of a batch size.
int topk_splits(const Context& ctx, int64_t n) {
  const int64_t by_sms = ceil_div(2 * std::max(ctx.cuda_caps().sm_count, 1), n);
  return static_cast<int>(std::clamp<int64_t>(by_sms, 1, kMaxTopkSplits));
}

template <auto* kernel>
void launch_topk(Context& ctx, const TopkArgs& p, dim3 grid, size_t smem) {
  if (smem > 48 * 1024) {
    const int optin = max_optin_smem();
    DSPARK_CHECK_KIND(unsupported, smem <= static_cast<size_t>(optin),
                      "index_topk on CUDA: k = {} with {} heads of {} needs {} KB of shared "
                      "memory per block; this GPU allows {} KB",
                      p.k, p.heads, p.dim, smem / 1024, optin / 1024);
    allow_dynamic_smem<kernel>(smem);
  }
  kernel<<<grid, kTopkThreads, smem, stream_of(ctx)>>>(p);
  DSPARK_CUDA_CHECK_LAUNCH();
}

// ---- sparse_paged_attention ------------------------------------------------------------------

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
constexpr int kRowsPerWarp = 4;
constexpr int kHeadsPerCta = kAttnWarps * kRowsPerWarp;
constexpr int kKeyTile = 32;
constexpr int kMaxSparseDim = 576;  // MLA's absorbed query: a latent of 512 and a rope key of 64

template <typename T>
struct SparseArgs {
  const void* q;  // [n, heads, dq]
  FloatKind q_kind;
  int64_t q_stride_token, q_stride_head;
  void* out;  // [n, heads, dv]
  FloatKind out_kind;
  int64_t out_stride_token, out_stride_head;
  const T* k_pages;  // [n_pages, page_size, 1, >= dq]
  const T* v_pages;  // [n_pages, page_size, 1, >= dv]
  int64_t k_page_stride, k_slot_stride, v_page_stride, v_slot_stride;
  const int32_t* q_indptr;
  const int32_t* page_indptr;
  const int32_t* page_indices;
  const int32_t* ids;  // [n, k]
  int n_rows, heads, dq, dv, k, page_size;
  float scale;
};

template <int NC>
constexpr size_t sparse_smem_bytes() {
  constexpr int kD = NC * 32;
  return sizeof(float) * (kHeadsPerCta * kD + kKeyTile * (kD + 1) + kKeyTile * kD);
}

template <typename T, int NC>
__global__ void __launch_bounds__(kAttnThreads) sparse_paged_attention_kernel(SparseArgs<T> p) {
  constexpr int kD = NC * 32;  // max(dq, dv) padded to whole warps
  extern __shared__ float smem[];
  float* s_q = smem;                       // [kHeadsPerCta][kD], scaled, zero padded
  float* s_k = s_q + kHeadsPerCta * kD;    // [kKeyTile][kD + 1]
  float* s_v = s_k + kKeyTile * (kD + 1);  // [kKeyTile][kD]
  __shared__ int64_t s_k_off[kKeyTile], s_v_off[kKeyTile];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x;
  const int h_begin = static_cast<int>(blockIdx.y) * kHeadsPerCta;
  const int nh = min(kHeadsPerCta, p.heads - h_begin);
  const int row = attn::row_of_token(p.q_indptr, p.n_rows, static_cast<int>(t));
  const int32_t* row_pages = p.page_indices + p.page_indptr[row];
  const int32_t* ids = p.ids + t * p.k;

  // Columns past dq / dv stay zero in every tile (q is zero there too, but must not meet NaN).
  for (int idx = threadIdx.x; idx < kKeyTile * (2 * kD + 1); idx += kAttnThreads) s_k[idx] = 0.0f;
  for (int idx = threadIdx.x; idx < kHeadsPerCta * kD; idx += kAttnThreads) {
    const int i = idx / kD, d = idx - i * kD;
    float v = 0.0f;
    if (i < nh && d < p.dq) {
      const int64_t h = h_begin + i;
      v = device::load_float(p.q, t * p.q_stride_token + h * p.q_stride_head + d, p.q_kind) *
          p.scale;
    }
    s_q[idx] = v;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][NC];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[rr][c] = 0.0f;
  }

  for (int key0 = 0; key0 < p.k; key0 += kKeyTile) {
    __syncthreads();  // the previous tile is done with s_k, s_v and the offsets
    if (threadIdx.x < kKeyTile) {
      const int i = key0 + static_cast<int>(threadIdx.x);
      const int32_t j = i < p.k ? ids[i] : -1;
      int64_t k_off = -1, v_off = -1;
      if (j >= 0) {
        const int64_t page = row_pages[j / p.page_size], slot = j % p.page_size;
        k_off = page * p.k_page_stride + slot * p.k_slot_stride;
        v_off = page * p.v_page_stride + slot * p.v_slot_stride;
      }
      s_k_off[threadIdx.x] = k_off;
      s_v_off[threadIdx.x] = v_off;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kKeyTile * p.dq; idx += kAttnThreads) {
      const int jj = idx / p.dq, d = idx - jj * p.dq;
      const int64_t off = s_k_off[jj];
      s_k[jj * (kD + 1) + d] = off >= 0 ? device::to_float(p.k_pages[off + d]) : 0.0f;
    }
    for (int idx = threadIdx.x; idx < kKeyTile * p.dv; idx += kAttnThreads) {
      const int jj = idx / p.dv, d = idx - jj * p.dv;
      const int64_t off = s_v_off[jj];
      s_v[jj * kD + d] = off >= 0 ? device::to_float(p.v_pages[off + d]) : 0.0f;
    }
    __syncthreads();
    const bool valid = s_k_off[lane] >= 0;
    // A tile of -1 ids only (the offsets are the block's, so every warp skips it alike).
    if (!__any_sync(device::kFullMask, valid)) continue;

#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int i = warp + rr * kAttnWarps;
      if (i >= nh) break;
      const float* q_row = s_q + i * kD;
      const float* k_row = s_k + lane * (kD + 1);
      float s = 0.0f;
#pragma unroll 16
      for (int d = 0; d < kD; ++d) s += q_row[d] * k_row[d];
      s = valid ? s * attn::kLog2e : -INFINITY;
      attn::online_softmax_tile<NC, kKeyTile>(s, valid, m[rr], l[rr], acc[rr], s_v, kD, lane);
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int i = warp + rr * kAttnWarps;
    if (i >= nh) break;
    const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;  // no key: zeros
    const int64_t base = t * p.out_stride_token + (h_begin + i) * p.out_stride_head;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < p.dv) device::store_float(p.out, base + d, p.out_kind, acc[rr][c] * inv);
    }
  }
}

template <typename T, int NC>
void launch_sparse(Context& ctx, const SparseArgs<T>& a, dim3 grid) {
  constexpr size_t kSmem = sparse_smem_bytes<NC>();
  if constexpr (kSmem > 48 * 1024) {
    const int optin = max_optin_smem();
    DSPARK_CHECK_KIND(unsupported, kSmem <= static_cast<size_t>(optin),
                      "sparse_paged_attention on CUDA: {} columns need {} KB of shared memory "
                      "per block; this GPU allows {} KB",
                      NC * 32, kSmem / 1024, optin / 1024);
    allow_dynamic_smem<&sparse_paged_attention_kernel<T, NC>>(kSmem);
  }
  sparse_paged_attention_kernel<T, NC><<<grid, kAttnThreads, kSmem, stream_of(ctx)>>>(a);
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace

void index_topk(Context& ctx, const Tensor& q, const Tensor& head_weights, const PagedKv& keys,
                const Tensor& q_indptr, const Tensor& q_pos, float scale, const Tensor& ids) {
  const int64_t n = q.size(0), n_rows = q_indptr.numel() - 1;
  if (n == 0 || n_rows <= 0) return;
  const Tensor& kp = keys.k_pages;
  const int64_t k = ids.size(1), page_size = kp.size(1);
  TopkArgs p{};
  p.q = q.data();
  p.q_kind = float_kind(q.dtype());
  p.q_stride_token = q.stride(0);
  p.q_stride_head = q.stride(1);
  p.w = head_weights.data();
  p.w_kind = float_kind(head_weights.dtype());
  p.w_stride = head_weights.stride(0);
  p.k_pages = kp.data();
  p.page_stride = kp.stride(0);
  p.slot_stride = kp.stride(1);
  p.q_indptr = static_cast<const int32_t*>(q_indptr.data());
  p.q_pos = static_cast<const int32_t*>(q_pos.data());
  p.page_indptr = static_cast<const int32_t*>(keys.page_indptr.data());
  p.page_indices = static_cast<const int32_t*>(keys.page_indices.data());
  p.kv_lens = static_cast<const int32_t*>(keys.kv_lens.data());
  p.ids = static_cast<int32_t*>(ids.data());
  p.n_rows = static_cast<int>(n_rows);
  p.heads = static_cast<int>(q.size(1));
  p.dim = static_cast<int>(q.size(2));
  p.k = static_cast<int>(k);
  p.page_size = static_cast<int>(page_size);
  p.scale = scale;
  // Room for k entries plus at least two tiles before a cut (at least k: a cut every k offers).
  p.capacity = static_cast<int>(k + std::max<int64_t>(k, 2 * kTopkThreads));
  p.n_splits = topk_splits(ctx, n);
  if (p.n_splits > 1) {
    // The splits' candidates: keys, positions, counts (each region a multiple of 4 bytes).
    const size_t slots = static_cast<size_t>(n) * static_cast<size_t>(p.n_splits);
    const size_t list_bytes = slots * static_cast<size_t>(k) * sizeof(uint32_t);
    char* base = static_cast<char*>(ctx.scratch(2 * list_bytes + slots * sizeof(int32_t)));
    p.cand_key = reinterpret_cast<uint32_t*>(base);
    p.cand_pos = reinterpret_cast<int32_t*>(base + list_bytes);
    p.cand_count = reinterpret_cast<int32_t*>(base + 2 * list_bytes);
  }
  const size_t buffer_bytes =
      static_cast<size_t>(p.capacity) * (sizeof(uint32_t) + sizeof(int32_t));
  const size_t smem = sizeof(float) * static_cast<size_t>(p.heads) * (p.dim + 1) + buffer_bytes;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(p.n_splits));
  dispatch_float(kp.dtype(), [&]<typename TK>(TypeTag<TK>) {
    launch_topk<&index_topk_kernel<device_t<TK>>>(ctx, p, grid, smem);
  });
  if (p.n_splits > 1)
    launch_topk<&index_topk_merge_kernel>(ctx, p, dim3(static_cast<unsigned>(n)), buffer_bytes);
}

void sparse_paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv,
                            const Tensor& q_indptr, const Tensor& ids, float scale,
                            const Tensor& out) {
  const int64_t n = q.size(0), heads = q.size(1), dq = q.size(2), dv = out.size(2);
  const int64_t n_rows = q_indptr.numel() - 1;
  if (n == 0 || heads == 0 || n_rows <= 0) return;
  const Tensor &kp = kv.k_pages, &vp = kv.v_pages;
  const int64_t width = std::max(dq, dv);
  DSPARK_CHECK_KIND(unsupported, width <= kMaxSparseDim,
                    "sparse_paged_attention on CUDA: head dims {} / {} (supported: up to {})", dq,
                    dv, kMaxSparseDim);
  DSPARK_CHECK_KIND(unsupported, kp.dtype() == vp.dtype(),
                    "sparse_paged_attention on CUDA: K pages {} and V pages {} differ in dtype",
                    dtype_name(kp.dtype()), dtype_name(vp.dtype()));
  const dim3 grid(static_cast<unsigned>(n),
                  static_cast<unsigned>(ceil_div(heads, int64_t{kHeadsPerCta})));
  dispatch_float(kp.dtype(), [&]<typename T>(TypeTag<T>) {
    using D = device_t<T>;
    SparseArgs<D> a{};
    a.q = q.data();
    a.q_kind = float_kind(q.dtype());
    a.q_stride_token = q.stride(0);
    a.q_stride_head = q.stride(1);
    a.out = out.data();
    a.out_kind = float_kind(out.dtype());
    a.out_stride_token = out.stride(0);
    a.out_stride_head = out.stride(1);
    a.k_pages = device_ptr<T>(kp);
    a.v_pages = device_ptr<T>(vp);
    a.k_page_stride = kp.stride(0);
    a.k_slot_stride = kp.stride(1);
    a.v_page_stride = vp.stride(0);
    a.v_slot_stride = vp.stride(1);
    a.q_indptr = static_cast<const int32_t*>(q_indptr.data());
    a.page_indptr = static_cast<const int32_t*>(kv.page_indptr.data());
    a.page_indices = static_cast<const int32_t*>(kv.page_indices.data());
    a.ids = static_cast<const int32_t*>(ids.data());
    a.n_rows = static_cast<int>(n_rows);
    a.heads = static_cast<int>(heads);
    a.dq = static_cast<int>(dq);
    a.dv = static_cast<int>(dv);
    a.k = static_cast<int>(ids.size(1));
    a.page_size = static_cast<int>(kp.size(1));
    a.scale = scale;
    if (width <= 64)
      launch_sparse<D, 2>(ctx, a, grid);
    else if (width <= 128)
      launch_sparse<D, 4>(ctx, a, grid);
    else if (width <= 256)
      launch_sparse<D, 8>(ctx, a, grid);
    else
      launch_sparse<D, kMaxSparseDim / 32>(ctx, a, grid);
  });
}

}  // namespace dspark::cuda
