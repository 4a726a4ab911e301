// The tensor-core paged_attention kernel (attention.cuh; the op's contract: ops/attention.h), for
// 16-bit caches and head_dim 64 / 128 / 256, and head_dim 576 where V is K (MLA's absorbed form):
// decode, verify and draft blocks, in the FlashAttention-2 manner.
//  - A CTA (4 warps) owns the same up to 16 query rows as the CUDA-core kernel (GQA heads x tokens
//    of one KV head: one m16 tile of the MMA) and, with split keys (grid.z), one contiguous range
//    of 64-key tiles; the tiles of the visible keys are dealt to the splits as evenly as possible.
//  - K and V tiles (64 keys x head_dim, in the cache's dtype) are copied into shared memory with
//    cp.async, two tiles in flight: the copy of the next tile overlaps the math of this one. Keys
//    outside the CTA's visible range are zero-filled. Shared rows are padded by 16 bytes, which
//    makes every fragment load below (ldmatrix, four 8x8 matrices at a time; V's transposed) free
//    of bank conflicts.
//  - Warp w takes keys 16w .. 16w+15 of each tile: S = Q.K^T (head_dim / 16 x 2 MMAs), scaled and
//    masked per row, an online softmax in f32 with base-2 exponentials, then P (rounded to the
//    cache dtype, as the MMA's A operand straight from the S registers) times V accumulates O in
//    f32 (head_dim / 8 MMAs).
//  - At the end the 4 warps' (max, sum, O) meet in shared memory and are merged in warp order; the
//    CTA writes the normalised rows, or with split keys the partial state (O, max, sum), which
//    the tile's last split CTA merges (merge_splits_if_last, attention.cuh) or, without arrival
//    counters, combine_splits_kernel (attention.cu).
//
// MLA's latent (head_dim 576 = a latent of 512 + a rope key of 64, one KV "head" whose V pages are
// its K pages): O per warp as above would take 288 registers a thread. So the warps still score
// keys 16w .. 16w+15, but split P.V by O's columns (warp w: columns 144w .. 144w+143, 72
// registers), and a tile's rows meet twice in shared memory: the warps' row maxima (every warp
// then rescales with the same running max, so a warp's partial sums need no rescaling at the
// end) and P, rounded to the cache dtype, [16 rows][64 keys]. The tile is copied once (V is its
// rows), 170 KB of shared memory with two stages.
// Masking per row is the op's: keys [lo, hi) with hi = min(kv_len, pages * page_size, causal ?
// pos + 1 : kv_len), lo = window ? pos - window + 1 : 0; a row that sees no key writes zeros.
//
// Copies before the wait. A CTA's first K/V byte would arrive after the wait for the kernel before
// it plus two dependent round trips (q and the page ids, then K/V), and a decode CTA at 1k
// context owns a single tile, so that latency would be its whole fixed cost. So the kernel:
//  - copies the first two tiles of its key range (page ids and K/V) before pdl_wait(), i.e. while
//    the kernel before it (qkv_prologue) still runs, except the keys from the row's first new
//    token on (this step's K/V, which that kernel writes): those and q follow right after the
//    wait. This needs the K/V below a row's new tokens to be written before the kernel preceding
//    paged_attention started (ops/attention.h; the engine's forwards and drafts do that);
//  - past the first two tiles, looks the page ids of the tile after next up during this tile's
//    math (shared s_off), instead of one dependent round trip per tile before its copy;
//  - for decode tiles merged by their last split CTA (at most one row per warp), releases the
//    partials with one acq_rel atomic after a barrier and merges them from shared memory after
//    one cp.async round trip (merge_splits_smem), instead of head_dim / 32 + 1 dependent L2 reads.
// (H200, bench_attention decode: 13.9 -> 9.2 us at 1k context, 42.9 -> 32.0 us at 16k.)
//
// The cluster merge (SplitMerge::cluster, policy/attention.h: sm_90, split launches of verify and
// draft blocks, and of decode tiles unless Tuning::attention_decode_cluster_splits is off;
// kCluster below). Instead of writing every split's partial rows to global memory and merging
// them in a second launch (combine_splits_kernel) or in the last split CTA:
//  - the launch (with 2..8 splits, decode 2..16) makes the grid.z split CTAs of each query tile
//    one thread-block cluster of {1, 1, n_splits}, together with the PDL attribute; the policy
//    caps such launches at 8 splits (the portable cluster size; decode tiles at 16, a
//    non-portable size), so a graph's key is the count the launch uses;
//  - per segment of the tile (segments depend on the tile only, so all CTAs of a cluster run the
//    same ones), each CTA leaves its partial rows (acc..., max, sum: what it would write to
//    `part`) in its shared memory after the warps' O tiles, in the K/V stages, then a cluster
//    barrier; CTA r merges rows r, r + S, ... reading the S splits' rows from its peers' shared
//    memory (merge_split_item_from, the combine kernel's operations in its order: the same bits as
//    the combine kernel at the same split count) and writes the normalised rows; a second cluster
//    barrier before the K/V stages are reused or the CTA exits, since peers read its rows;
//  - no `part` writes, no combine launch, no arrival counters; shared memory does not grow.
#include <climits>
#include <type_traits>

#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/sync.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels/attention.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/op_profile.h"

namespace dspark::cuda {
namespace attn {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileKeys = kSplitKeys;          // keys per shared-memory tile
constexpr int kWarpKeys = kTileKeys / kWarps;  // keys per warp and tile: one k16 step of P.V
static_assert(kWarpKeys == 16 && kMaxRows == 16);

// MLA's latent: the one head_dim whose V is K (the file comment).
constexpr int kLatentHeadDim = static_cast<int>(kAttentionLatentHeadDim);

// Shared memory, in elements of the cache dtype: q [16][kLd], then K and V [2 stages][64][kLd].
// After the key loop the warps' O tiles, [kWarps][16][kOutLd] f32, reuse the K/V stages, and in
// the cluster variant the CTA's partial rows, [16][kPartLd] f32 (acc..., max, sum), follow them.
// kShared (V is K): no V stages, no O tiles (the partial rows start at the K stages), and P
// [16][kPLd] after the K stages.
template <int HD, bool kShared = false>
struct Layout {
  static constexpr int kLd = HD + 8;
  static constexpr int kOutLd = HD + 8;  // 8 banks per row: the warps' float2 stores conflict-free
  static constexpr int kPartLd = HD + 2;
  static constexpr int kPLd = kTileKeys + 8;  // P's rows, 16 bytes apart in the banks
  static constexpr int kPart = kShared ? 0 : kWarps * kMaxRows * kOutLd;  // floats from K stages
  static constexpr int kK = kMaxRows * kLd;
  static constexpr int kV = kShared ? kK : kK + 2 * kTileKeys * kLd;
  static constexpr int kP = kV + 2 * kTileKeys * kLd;
  static constexpr int kElems = kP + (kShared ? kMaxRows * kPLd : 0);
  static constexpr size_t kBytes = static_cast<size_t>(kElems) * 2;
  static_assert((kPart + kMaxRows * kPartLd) * 4 <= (kShared ? 2 : 4) * kTileKeys * kLd * 2);
  static_assert(kBytes <= 227 * 1024);
};

// The end of a split CTA of a decode tile (arrival counters set, at most one query
// row per warp; partial rows of HD + 4 floats, 16-byte aligned). Versus merge_splits_if_last
// (attention.cuh): the CTA's partials are released by one acq_rel atomic of thread 0 after a
// barrier instead of a fence in every thread plus a relaxed atomic, and the last CTA copies all
// of the tile's partial rows into shared memory at once (cp.async, one round trip) instead of
// reading them from L2 one head_dim slice after the other; then each warp merges its row with
// merge_split_item's operations in merge_split_item's order, so the outputs have the same bits.
template <typename T, int HD>
__device__ void merge_splits_smem(const AttentionArgs<T>& p, const CtaQueries& cq, float* smem) {
  constexpr int kStride = HD + 4;
  static_assert(kStride % 4 == 0);
  static_assert(sizeof(float) * kWarps * kMaxSplits * kStride <= Layout<HD>::kBytes);
  __shared__ bool s_last;
  const unsigned tile = blockIdx.x + gridDim.x * blockIdx.y;
  __syncthreads();  // every thread's partials are written (and the shared arrays are free)
  if (threadIdx.x == 0) s_last = device::atomic_inc_acq_rel(p.counters + tile) == gridDim.z - 1;
  __syncthreads();
  if (!s_last) return;
  const int n_items = (cq.t_end - cq.t_begin) * cq.nh;  // <= kWarps (the launcher's condition)
  const int n_splits = p.n_splits;
  const int chunks = n_splits * kStride / 4;  // 16-byte chunks of one row's partials
  for (int idx = threadIdx.x; idx < n_items * chunks; idx += kThreads) {
    const int i = idx / chunks, ch = idx - i * chunks;
    const int64_t tok = cq.t_begin + i / cq.nh, h = cq.h_begin + i % cq.nh;
    device::cp_async16(smem + static_cast<int64_t>(i) * n_splits * kStride + ch * 4,
                       p.part + (tok * p.n_heads + h) * n_splits * kStride + ch * 4);
  }
  device::cp_async_commit();
  device::cp_async_wait<0>();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp < n_items) {
    // merge_split_item (attention.cuh) with the partials in shared memory.
    const float* part = smem + warp * n_splits * kStride;
    const int64_t tok = cq.t_begin + warp / cq.nh, h = cq.h_begin + warp % cq.nh;
    const int64_t base = tok * p.out_stride_token + h * p.out_stride_head;
    merge_split_item_from([part](int s, int64_t i) { return part[s * int64_t{kStride} + i]; },
                          n_splits, HD, p.out, p.out_kind, base, lane);
  }
  if (threadIdx.x == 0) p.counters[tile] = 0;  // ready for the next launch
}

// This lane's four scores of a query row in a warp's 16 keys (keys kw0 + 8 nt + 2c (+1), nt = e /
// 2), scaled by log2e; -inf for keys outside the row's [lo, hi).
__device__ __forceinline__ void masked_scores(const float (&v)[4], int kw0, int c, int lo, int hi,
                                              float (&x)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int j = kw0 + (e >> 1) * 8 + 2 * c + (e & 1);
    x[e] = (j >= lo && j < hi) ? v[e] * kLog2e : -INFINITY;
  }
}

// One online-softmax step of a query row (r: rows g / g + 8 of the m16 tile) given its max mx over
// the tile's keys: the running max m and sum l, the row's O rescaled, and this lane's four
// probabilities pe.
template <int NT>
__device__ __forceinline__ void softmax_step(const float (&x)[4], float mx, float& m, float& l,
                                             float (&o)[NT][4], int r, float (&pe)[4]) {
  const float m_new = fmaxf(m, mx);
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet: all zeros
  const float alpha = exp2f(m - m_use);
#pragma unroll
  for (int e = 0; e < 4; ++e) pe[e] = exp2f(x[e] - m_use);
  l = l * alpha + ((pe[0] + pe[1]) + (pe[2] + pe[3]));
  m = m_new;
#pragma unroll
  for (int dt = 0; dt < NT; ++dt) {
    o[dt][2 * r] *= alpha;
    o[dt][2 * r + 1] *= alpha;
  }
}

// kCluster: the cluster merge (the file comment), launched with n_splits > 1 only. HD 576: V is K
// (MLA's latent, the file comment).
template <typename T, int HD, bool kCluster>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(AttentionArgs<T> p) {
  constexpr bool kShared = HD == kLatentHeadDim;
  using L = Layout<HD, kShared>;
  constexpr int kLd = L::kLd;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  // n8 tiles of O a warp holds: all of its columns, or with kShared the warp's HD / kWarps.
  constexpr int kDimTiles = kShared ? HD / 8 / kWarps : HD / 8;
  static_assert(!kShared || (HD / kWarps) % 16 == 0, "two n8 tiles per transposed ldmatrix");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_q = reinterpret_cast<T*>(smem_raw);
  T* s_k = s_q + L::kK;
  T* s_v = s_q + L::kV;
  T* s_p = s_q + L::kP;  // kShared: P of the tile
  float* s_o = reinterpret_cast<float*>(s_k);
  float* s_part = s_o + L::kPart;  // kCluster: this segment's partial rows
  __shared__ int s_lo[kMaxRows], s_hi[kMaxRows];
  __shared__ float s_m[kWarps][kMaxRows], s_l[kWarps][kMaxRows];
  __shared__ float s_row_m[kMaxRows], s_row_l[kMaxRows];  // per row: max and sum over the warps
  __shared__ int s_seg_end, s_page0;
  __shared__ int s_fresh[kMaxRows];  // per row, the first key of this step
  // Per stage, the offsets (page, slot, KV head) of the keys of the tile copied into it; -1: no
  // visible key.
  __shared__ int64_t s_off[2 * kTileKeys];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const CtaQueries cq = cta_queries(p);
  const int kv_head = cq.kv_head, h_begin = cq.h_begin, nh = cq.nh, split = cq.split;
  const int t_end = cq.t_end;
  int t = cq.t_begin;
  // When the tile's last split CTA merges at most one row per warp: partial rows of HD + 4 floats
  // (16-byte aligned for merge_splits_smem); else HD + 2 (what the other merges read).
  const bool smem_merge = !kShared && p.n_splits > 1 && p.counters != nullptr &&
                          min(p.tokens_per_cta, p.n_tokens) * p.heads_per_cta <= kWarps;
  const int64_t part_stride = smem_merge ? HD + 4 : HD + 2;

  bool waited = false;
  while (t < t_end) {
    __syncthreads();  // the previous segment is done with the shared arrays
    // One round of independent loads: the row metadata (threads < 16, one query row each; it was
    // uploaded before the previous kernel started, so it may be read before pdl_wait) and, after
    // the wait, the CTA's query rows into registers (n_q is only known after the barrier).
    if (threadIdx.x < kMaxRows) {
      const int i = threadIdx.x;
      const int row_i = row_of_token(p.q_indptr, p.n_rows, t);
      const int q_end = p.q_indptr[row_i + 1];
      const int page0 = p.page_indptr[row_i], page1 = p.page_indptr[row_i + 1];
      const int kv_len = p.kv_lens[row_i];
      const int tok = t + i / nh;
      const int pos = tok < t_end ? p.q_pos[tok] : 0;
      const int seg_end_i = min(t_end, q_end);
      int key_lo = 0, key_hi = 0;  // padding rows of the m16 tile see no key
      if (i < (seg_end_i - t) * nh) {
        key_hi = min(kv_len, (page1 - page0) * p.page_size);
        if (p.causal) key_hi = min(key_hi, pos + 1);
        key_lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
      }
      s_lo[i] = key_lo;
      s_hi[i] = max(key_hi, key_lo);
      if (i == 0) {
        s_seg_end = seg_end_i;
        s_page0 = page0;
      }
      // The row's new tokens are its last keys, at their positions: the kernel before this one
      // may write the keys from here on, not the ones below (ops/attention.h).
      const int n_new = q_end - p.q_indptr[row_i];
      s_fresh[i] = i < (seg_end_i - t) * nh ? max(0, min(kv_len - n_new, pos)) : INT_MAX;
    }
    constexpr int kQIters = (kMaxRows * kChunks + kThreads - 1) / kThreads;
    uint4 qv[kQIters];
    auto load_q = [&] {
#pragma unroll
      for (int it = 0; it < kQIters; ++it) {
        const int idx = threadIdx.x + it * kThreads;
        const int i = idx / kChunks, cc = idx - i * kChunks;
        qv[it] = make_uint4(0, 0, 0, 0);
        if (idx < kMaxRows * kChunks && t + i / nh < t_end) {
          const int64_t tok = t + i / nh, h = h_begin + i % nh;
          qv[it] = *reinterpret_cast<const uint4*>(
              static_cast<const T*>(p.q) + tok * p.q_stride_token + h * p.q_stride_head + cc * 8);
        }
      }
    };
    __syncthreads();
    const int seg_end = s_seg_end;
    if (seg_end <= t) break;  // malformed q_indptr: never loop forever
    const int n_q = (seg_end - t) * nh;

    int kmin = INT_MAX, kmax = 0;
#pragma unroll
    for (int i = 0; i < kMaxRows; ++i) {
      if (s_hi[i] > s_lo[i]) {
        kmin = min(kmin, s_lo[i]);
        kmax = max(kmax, s_hi[i]);
      }
    }
    if (kmin >= kmax) kmin = kmax = 0;
    int fresh = INT_MAX;  // keys >= fresh may be written by the kernel before this one
#pragma unroll
    for (int i = 0; i < kMaxRows; ++i) fresh = min(fresh, s_fresh[i]);
    const int32_t* row_pages = p.page_indices + s_page0;
    const int tile0 = kmin / kTileKeys;
    const int n_tiles = kmax > kmin ? (kmax - 1) / kTileKeys + 1 - tile0 : 0;
    const int begin = tile0 + static_cast<int>(int64_t{split} * n_tiles / p.n_splits);
    const int end = tile0 + static_cast<int>(int64_t{split + 1} * n_tiles / p.n_splits);

    // The offset of key j's row (-1 if no row sees it), and the copies of the chunks of
    // tile `tile` (offsets in s_off[stage]) whose keys are in [key_lo, key_hi) into `stage` (zero:
    // the chunks without a key are filled with zeros).
    auto key_offset = [&](int j) { return key_row_offset(p, row_pages, kv_head, kmin, kmax, j); };
    // Without `zero`, an iteration whose keys (first .. last, the same for every thread of the
    // CTA) all lie outside [key_lo, key_hi) copies nothing and is skipped, by a branch that is
    // uniform over the CTA: the copies of this step's keys right after the wait (a decode row's
    // one new key, a verify's 17) then cost one or a few iterations, not kIters. kShared: K only.
    auto copy = [&](int tile, int stage, int key_lo, int key_hi, bool zero) {
      constexpr int kIters = kTileKeys * kChunks / kThreads;
      static_assert(kTileKeys * kChunks % kThreads == 0);
      T* dk = s_k + stage * kTileKeys * kLd;
      T* dv = s_v + stage * kTileKeys * kLd;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int first = tile * kTileKeys + it * kThreads / kChunks;
        const int last = tile * kTileKeys + (it * kThreads + kThreads - 1) / kChunks;
        if (!zero && (last < key_lo || first >= key_hi)) continue;
        const int idx = threadIdx.x + it * kThreads;
        const int jj = idx / kChunks, cc = idx % kChunks, j = tile * kTileKeys + jj;
        copy_kv_chunk<T, !kShared>(p, s_off[stage * kTileKeys + jj], j, cc, key_lo, key_hi, zero,
                                   dk + jj * kLd + cc * 8, dv + jj * kLd + cc * 8);
      }
    };
    {
      // The first two tiles (both stages) are copied before the wait, except the keys the kernel
      // before this one may write (this step's tokens: from `fresh` on, first segment only),
      // which follow right after it, together with q.
      static_assert(kThreads == 2 * kTileKeys);
      const int split_key = waited ? INT_MAX : fresh;
      const int tile_t = begin + static_cast<int>(threadIdx.x) / kTileKeys;
      s_off[threadIdx.x] =
          tile_t < end ? key_offset(tile_t * kTileKeys + static_cast<int>(threadIdx.x) % kTileKeys)
                       : -1;
      __syncthreads();
      if (begin < end) copy(begin, 0, INT_MIN, split_key, true);
      if (begin + 1 < end) copy(begin + 1, 1, INT_MIN, split_key, true);
      if (!waited) {
        pdl_wait();  // q and this step's K/V are written by the kernel before this one
        pdl_launch_dependents();
        waited = true;
      }
      load_q();
      if (split_key != INT_MAX) {
        if (begin < end) copy(begin, 0, split_key, INT_MAX, false);
        if (begin + 1 < end) copy(begin + 1, 1, split_key, INT_MAX, false);
      }
      device::cp_async_commit();  // one group: the first two tiles
    }
    // The query rows, zero past n_q (visible to all warps after the loop's first barrier).
#pragma unroll
    for (int it = 0; it < kQIters; ++it) {
      const int idx = threadIdx.x + it * kThreads;
      const int i = idx / kChunks, cc = idx - i * kChunks;
      if (idx < kMaxRows * kChunks)
        *reinterpret_cast<uint4*>(s_q + i * kLd + cc * 8) =
            i < n_q ? qv[it] : make_uint4(0, 0, 0, 0);
    }

    float o[kDimTiles][4];
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};  // rows g and g + 8
    const int lo_r[2] = {s_lo[g], s_lo[g + 8]}, hi_r[2] = {s_hi[g], s_hi[g + 8]};

    for (int tile = begin; tile < end; ++tile) {
      const int stage = (tile - begin) & 1;
      // In flight: this tile's copies and, past the first two tiles, the next tile's.
      if (tile == begin || tile + 1 >= end)
        device::cp_async_wait<0>();
      else
        device::cp_async_wait<1>();
      __syncthreads();
      // The key offsets of the tile after next (copied into this stage after this tile's math):
      // loaded now, stored below, so the page lookup overlaps the math.
      int64_t next_off = -1;
      if (tile + 2 < end && threadIdx.x < kTileKeys)
        next_off = key_offset((tile + 2) * kTileKeys + static_cast<int>(threadIdx.x));
      const int kw0 = tile * kTileKeys + warp * kWarpKeys;  // this warp's first key
      const T* kt = s_k + (stage * kTileKeys + warp * kWarpKeys) * kLd;

      // The fragments come from shared memory by ldmatrix, four 8x8 matrices per instruction;
      // lane 8j + r addresses row r of matrix j (rows kLd apart: 16 bytes apart in the banks).
      const int lrow = lane & 7, lmat = lane >> 3;
      float s[2][4] = {};  // keys kw0 + 8 nt + 2c (+1), rows g / g + 8
      // Q's A fragment: matrices (rows 0-7 | 8-15) x (columns kk | kk + 8); K's B fragments of the
      // two n8 tiles: (keys 0-7: columns kk | kk + 8), (keys 8-15: the same).
      const T* qrow = s_q + ((lmat & 1) * 8 + lrow) * kLd + (lmat >> 1) * 8;
      const T* krow = kt + ((lmat >> 1) * 8 + lrow) * kLd + (lmat & 1) * 8;
#pragma unroll
      for (int kk = 0; kk < HD; kk += 16) {
        uint32_t a[4], b[4];
        device::ldmatrix_x4(a, qrow + kk);
        device::ldmatrix_x4(b, krow + kk);
        device::mma<T>(s[0], a[0], a[1], a[2], a[3], b[0], b[1]);
        device::mma<T>(s[1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }

      // The scores, scaled (and soft-capped: one branch for all 8, not one per element, which
      // kept the compiler from interleaving the elements).
      float v[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[r][e] = s[e >> 1][2 * r + (e & 1)] * p.scale;
      }
      if (p.softcap > 0.0f) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
#pragma unroll
          for (int e = 0; e < 4; ++e) v[r][e] = p.softcap * tanhf(v[r][e] / p.softcap);
        }
      }
      if constexpr (kShared) {
        // The tile's row maxima over the four warps' keys; every warp then applies the same
        // running max, writes its keys' P into the tile's P rows, and after a barrier multiplies
        // all 64 keys' P with V (the tile's K rows) for its own columns of O.
        float x[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          masked_scores(v[r], kw0, c, lo_r[r], hi_r[r], x[r]);
          float mx = fmaxf(fmaxf(x[r][0], x[r][1]), fmaxf(x[r][2], x[r][3]));
          mx = fmaxf(mx, __shfl_xor_sync(device::kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(device::kFullMask, mx, 2));
          if (c == 0) s_m[warp][g + 8 * r] = mx;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int i = g + 8 * r;
          float mx = s_m[0][i];
#pragma unroll
          for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][i]);
          float pe[4];
          softmax_step(x[r], mx, m_r[r], l_r[r], o, r, pe);
          T* pw = s_p + i * L::kPLd + warp * kWarpKeys + 2 * c;
          *reinterpret_cast<uint32_t*>(pw) = device::pack2<T>(pe[0], pe[1]);
          *reinterpret_cast<uint32_t*>(pw + 8) = device::pack2<T>(pe[2], pe[3]);
        }
        __syncthreads();
        // P's A fragments as Q's; V's B fragments transposed, two n8 tiles per ldmatrix: keys
        // (0-7 | 8-15 of the k16 step) x (columns dt * 8 | dt * 8 + 8 of the warp's).
        const T* prow = s_p + ((lmat & 1) * 8 + lrow) * L::kPLd + (lmat >> 1) * 8;
        const T* vrow = s_k + (stage * kTileKeys + (lmat & 1) * 8 + lrow) * kLd + (lmat >> 1) * 8 +
                        warp * (HD / kWarps);
#pragma unroll
        for (int ks = 0; ks < kTileKeys / 16; ++ks) {
          uint32_t a[4];
          device::ldmatrix_x4(a, prow + ks * 16);
#pragma unroll
          for (int dt = 0; dt < kDimTiles; dt += 2) {
            uint32_t b[4];
            device::ldmatrix_x4_trans(b, vrow + ks * 16 * kLd + dt * 8);
            device::mma<T>(o[dt], a[0], a[1], a[2], a[3], b[0], b[1]);
            device::mma<T>(o[dt + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
          }
        }
      } else {
        uint32_t pa[4];  // P as the A operand of P.V (keys 2c, 2c+1 | 2c+8, 2c+9 of the warp)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float x[4];
          masked_scores(v[r], kw0, c, lo_r[r], hi_r[r], x);
          float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
          mx = fmaxf(mx, __shfl_xor_sync(device::kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(device::kFullMask, mx, 2));
          float pe[4];
          softmax_step(x, mx, m_r[r], l_r[r], o, r, pe);
          pa[r] = device::pack2<T>(pe[0], pe[1]);
          pa[2 + r] = device::pack2<T>(pe[2], pe[3]);
        }

        // V's B fragments, two n8 tiles per transposed ldmatrix: matrices (keys 0-7 | 8-15 of the
        // warp) x (columns dt * 8 | dt * 8 + 8).
        const T* vt = s_v + (stage * kTileKeys + warp * kWarpKeys) * kLd;
        const T* vrow = vt + ((lmat & 1) * 8 + lrow) * kLd + (lmat >> 1) * 8;
#pragma unroll
        for (int dt = 0; dt < kDimTiles; dt += 2) {
          uint32_t b[4];
          device::ldmatrix_x4_trans(b, vrow + dt * 8);
          device::mma<T>(o[dt], pa[0], pa[1], pa[2], pa[3], b[0], b[1]);
          device::mma<T>(o[dt + 1], pa[0], pa[1], pa[2], pa[3], b[2], b[3]);
        }
      }
      if (tile + 2 < end && threadIdx.x < kTileKeys)
        s_off[stage * kTileKeys + threadIdx.x] = next_off;
      __syncthreads();       // everyone is done with this stage before it is refilled
      if (tile + 2 < end) {  // refill this stage with the tile after next
        copy(tile + 2, stage, INT_MIN, INT_MAX, true);
        device::cp_async_commit();
      }
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_r[r] += __shfl_xor_sync(device::kFullMask, l_r[r], 1);
      l_r[r] += __shfl_xor_sync(device::kFullMask, l_r[r], 2);
    }
    __syncthreads();
    // Where query row i's partial state (acc..., max, sum) goes with split keys.
    auto part_row = [&](int i) {
      if constexpr (kCluster) {
        return s_part + i * L::kPartLd;
      } else {
        const int64_t tok = t + i / nh, h = h_begin + i % nh;
        return p.part + ((tok * p.n_heads + h) * p.n_splits + split) * part_stride;
      }
    };
    if constexpr (kShared) {
      // Every warp applied the same running max: a row's sum is its warps' sums, and each warp
      // writes its own columns of the row.
      if (c == 0) {
        s_l[warp][g] = l_r[0];
        s_l[warp][g + 8] = l_r[1];
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = g + 8 * r;
        if (i >= n_q) continue;
        float l = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) l += s_l[w][i];
        const int64_t tok = t + i / nh, h = h_begin + i % nh;
        const int col0 = warp * (HD / kWarps) + 2 * c;
        if (p.n_splits == 1) {
          const float inv = l > 0.0f ? 1.0f / l : 0.0f;
          const int64_t base = tok * p.out_stride_token + h * p.out_stride_head + col0;
#pragma unroll
          for (int dt = 0; dt < kDimTiles; ++dt) {
            device::store_float(p.out, base + dt * 8, p.out_kind, o[dt][2 * r] * inv);
            device::store_float(p.out, base + dt * 8 + 1, p.out_kind, o[dt][2 * r + 1] * inv);
          }
        } else {
          float* part = part_row(i);
#pragma unroll
          for (int dt = 0; dt < kDimTiles; ++dt) {
            part[col0 + dt * 8] = o[dt][2 * r];
            part[col0 + dt * 8 + 1] = o[dt][2 * r + 1];
          }
          if (warp == 0 && c == 0) {
            part[HD] = m_r[r];
            part[HD + 1] = l;
          }
        }
      }
    } else {
      // Merge the warps: each scales its O rows to the CTA's max, then they are added in warp
      // order.
      if (c == 0) {
        s_m[warp][g] = m_r[0];
        s_m[warp][g + 8] = m_r[1];
        s_l[warp][g] = l_r[0];
        s_l[warp][g + 8] = l_r[1];
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = g + 8 * r;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][i]);
        const float f = exp2f(m_r[r] - (mx == -INFINITY ? 0.0f : mx));
        float* dst = s_o + (warp * kMaxRows + i) * L::kOutLd;
#pragma unroll
        for (int dt = 0; dt < kDimTiles; ++dt)
          *reinterpret_cast<float2*>(dst + dt * 8 + 2 * c) =
              make_float2(o[dt][2 * r] * f, o[dt][2 * r + 1] * f);
      }
      // Each row's max and sum over the warps, once per row (not per element below).
      if (threadIdx.x < kMaxRows) {
        const int i = threadIdx.x;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][i]);
        const float m_use = mx == -INFINITY ? 0.0f : mx;
        float l = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) l += s_l[w][i] * exp2f(s_m[w][i] - m_use);
        s_row_m[i] = mx;
        s_row_l[i] = l;
      }
      __syncthreads();
      // Thread items of 4 columns of a row (kMergeIters per thread, every one's loads before the
      // first store); each column's sum over the warps in warp order, from 0.
      constexpr int kVecs = HD / 4;
      constexpr int kMergeIters = kMaxRows * kVecs / kThreads;
      static_assert(kMaxRows * kVecs % kThreads == 0);
      float acc[kMergeIters][4];
#pragma unroll
      for (int it = 0; it < kMergeIters; ++it) {
        const int idx = threadIdx.x + it * kThreads;
        const int i = idx / kVecs, d = (idx - i * kVecs) * 4;
        float4 ow[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
          ow[w] = *reinterpret_cast<const float4*>(s_o + (w * kMaxRows + i) * L::kOutLd + d);
        acc[it][0] = acc[it][1] = acc[it][2] = acc[it][3] = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          acc[it][0] += ow[w].x;
          acc[it][1] += ow[w].y;
          acc[it][2] += ow[w].z;
          acc[it][3] += ow[w].w;
        }
      }
#pragma unroll
      for (int it = 0; it < kMergeIters; ++it) {
        const int idx = threadIdx.x + it * kThreads;
        const int i = idx / kVecs, d = (idx - i * kVecs) * 4;
        if (i >= n_q) continue;
        const float mx = s_row_m[i], l = s_row_l[i];
        const int64_t tok = t + i / nh, h = h_begin + i % nh;
        if (p.n_splits == 1) {
          const float inv = l > 0.0f ? 1.0f / l : 0.0f;
          const int64_t base = tok * p.out_stride_token + h * p.out_stride_head + d;
#pragma unroll
          for (int e = 0; e < 4; ++e)
            device::store_float(p.out, base + e, p.out_kind, acc[it][e] * inv);
        } else {
          float* part = part_row(i);
#pragma unroll
          for (int e = 0; e < 4; ++e) part[d + e] = acc[it][e];
          if (d == 0) {
            part[HD] = mx;
            part[HD + 1] = l;
          }
        }
      }
    }
    if constexpr (kCluster) {
      // Before the next segment's copies overwrite the K/V stages (and s_part).
      if (p.n_splits > 1) merge_splits_cluster<HD>(p, s_part, n_q, t, nh, h_begin, kWarps);
    }
    t = seg_end;
  }
  if (!waited) pdl_wait();  // the grid completes after the kernel before it, always
  if constexpr (!kCluster) {
    if constexpr (!kShared) {
      if (smem_merge) {
        merge_splits_smem<T, HD>(p, cq, reinterpret_cast<float*>(smem_raw));
        return;
      }
    }
    if (p.n_splits > 1 && p.counters != nullptr)
      merge_splits_if_last(p, cq, reinterpret_cast<float*>(smem_raw));
  }
}

template <typename T, int HD, bool kCluster>
void launch(Context& ctx, const AttentionArgs<T>& a, dim3 grid) {
  constexpr size_t kSmem = Layout<HD, HD == kLatentHeadDim>::kBytes;
  static_assert(kSmem >= kMergeSmemBytes, "the split merge reuses the dynamic smem");
  if constexpr (kSmem > 48 * 1024)
    allow_dynamic_smem<&attention_mma_kernel<T, HD, kCluster>>(kSmem);
  // Decode launches cluster up to kMaxClusterSplits (16) split CTAs.
  if constexpr (kCluster)
    if (grid.z > 8) allow_nonportable_clusters<&attention_mma_kernel<T, HD, kCluster>>();
  const OpProfileScope profile(ctx, "paged_attention_mma()");  // also inside paged_attention
  // The cluster merge: the grid.z split CTAs of each query tile form one cluster.
  launch_pdl_cluster(attention_mma_kernel<T, HD, kCluster>, grid, dim3(kThreads), kSmem,
                     stream_of(ctx), dim3(1, 1, kCluster ? grid.z : 1), a);
}

template <typename T, int HD>
void launch_merge(Context& ctx, const AttentionArgs<T>& a, dim3 grid) {
  a.cluster ? launch<T, HD, true>(ctx, a, grid) : launch<T, HD, false>(ctx, a, grid);
}

}  // namespace

template <typename TKV>
void launch_attention_mma(Context& ctx, const AttentionArgs<TKV>& a, dim3 grid) {
  if constexpr (!std::is_same_v<TKV, float>) {
    switch (a.head_dim) {
      case 64:
        return launch_merge<TKV, 64>(ctx, a, grid);
      case 128:
        return launch_merge<TKV, 128>(ctx, a, grid);
      case 256:
        return launch_merge<TKV, 256>(ctx, a, grid);
      case kLatentHeadDim:
        DSPARK_CHECK_KIND(internal, a.k_pages == a.v_pages,
                          "paged_attention on tensor cores: head_dim {} needs V pages equal to K",
                          a.head_dim);
        return launch_merge<TKV, kLatentHeadDim>(ctx, a, grid);
      default:
        break;
    }
  }
  DSPARK_FAIL(unsupported, "paged_attention on tensor cores: head_dim {} with a {}-bit cache",
              a.head_dim, sizeof(TKV) * 8);
}

template void launch_attention_mma<float>(Context&, const AttentionArgs<float>&, dim3);
template void launch_attention_mma<__nv_bfloat16>(Context&, const AttentionArgs<__nv_bfloat16>&,
                                                  dim3);
template void launch_attention_mma<__half>(Context&, const AttentionArgs<__half>&, dim3);

}  // namespace attn
}  // namespace dspark::cuda
