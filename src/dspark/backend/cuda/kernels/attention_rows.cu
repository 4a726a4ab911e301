// The row-warp tensor-core paged_attention kernel (attention.cuh; the op's contract:
// ops/attention.h) for query tiles of several tokens: verify, draft blocks, prefill; 16-bit caches,
// head_dim 64 / 128. attention_mma.cu's kernel gives a CTA one m16 tile (at most 16 query rows:
// 4 tokens x a GQA group of 4) and splits each 64-key tile over its 4 warps; a verify of 16 drafts
// then has 5 CTAs per KV head, each copying the same keys, and each warp's 16 keys per tile leave
// a long tail of per-warp merges (H200, Qwen3-8B shape, 17 queries at 1k: 13.2 us, 3,500
// instructions per warp, 12% occupancy under ncu; session 15). Here:
//  - a CTA owns up to 128 query rows (tokens x heads of one KV head, row i = token i / nh, head
//    i % nh; rows_tiling, attention.cu: by default one CTA per request's tokens when they fit)
//    and, with split keys (grid.z), one contiguous range of 64-key tiles, dealt as in
//    attention_mma.cu;
//  - warp w owns m16 tile w / KG of the rows and keys [w % KG * 64 / KG, +64 / KG) of every tile
//    (KG = 1, 2 or 4 key groups, at most 8 warps): S = Q.K^T, the online softmax (f32, base-2
//    exponentials) and O += P.V on its own rows, the fragments by ldmatrix as in attention_mma.cu;
//    all warps share one copy of each K/V tile, so a tile is copied once per CTA;
//  - K/V tiles are copied by cp.async into 3 stages; the first three tiles' copies are issued
//    before pdl_wait(), except the keys of the rows' new tokens (which the kernel before this one
//    writes: ops/attention.h), which follow right after the wait together with q (the early
//    variant of attention_mma.cu, same rule);
//  - at the end, with KG > 1, the key groups of an m16 tile are merged in shared memory in group
//    order; then the rows are written normalised (one split), or as partial rows (acc..., max,
//    sum) merged in a thread-block cluster of the tile's split CTAs (merge_splits_cluster,
//    attention.cuh: sm_90, 2..8 splits) or written to `part` for combine_splits_kernel.
// Masking per row is the op's: keys [lo, hi) with hi = min(kv_len, pages * page_size, causal ?
// pos + 1 : kv_len), lo = window ? pos - window + 1 : 0; a row that sees no key writes zeros.
// Outcome (session 15, H200; numbers in attention.cu and docs/perf-notes.md): correct, but
// opt-in (DSPARK_ATTN_ROWS). For one request it is slower than attention_mma.cu (17 queries at 1k:
// 17.4 us with 1 key group). Its split count is capped at the portable cluster of 8, so each warp
// walks 3 tiles x 64 / KG keys, against attention_mma.cu's 3 x 16 on 240 CTAs: what bounds this
// launch is one warp's serial chain, not the K/V copies it saves. For 2-4 requests it is faster
// alone (4 x 17 at 1k: 42.8 against 48.0 us) but slower in the graphed batch-4 verify (7.133
// against 7.016 ms).
#include <atomic>
#include <climits>
#include <type_traits>

#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/attention.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/op_profile.h"

namespace dspark::cuda {
namespace attn {
namespace {

constexpr int kTileKeys = kSplitKeys;  // keys per shared-memory tile
constexpr int kMaxWarps = 8;
constexpr int kMaxThreads = kMaxWarps * 32;
constexpr int kRowsCap = kMaxWarps * 16;  // query rows per CTA (KG = 1)
constexpr int kStages = 3;

std::atomic<uint64_t> g_launches{0};

// Shared memory, in elements of the cache dtype: K and V [kStages][64][kLd], then q [rows][kLd].
// After the key loop the K/V stages hold the key groups' O tiles ([m16 tiles][16][kOutLd] f32)
// and then the CTA's partial rows ([rows][kPartLd] f32: acc..., max, sum).
template <int HD>
struct RowsLayout {
  static constexpr int kLd = HD + 8;
  static constexpr int kOutLd = HD + 4;
  static constexpr int kPartLd = HD + 2;
  static constexpr int kStage = kTileKeys * kLd;
  static constexpr size_t kKvBytes = size_t{2} * kStages * kStage * 2;
  static constexpr size_t bytes(int rows) { return kKvBytes + size_t{2} * rows * kLd; }
  static_assert(sizeof(float) * kRowsCap * kPartLd <= kKvBytes);
  static_assert(sizeof(float) * (kMaxWarps / 2) * 16 * kOutLd <= kKvBytes);
  static_assert(bytes(kRowsCap) <= 227 * 1024);
};

template <typename T, int HD, int KG>
__global__ void __launch_bounds__(kMaxThreads) attention_rows_kernel(AttentionArgs<T> p) {
  using L = RowsLayout<HD>;
  constexpr int kLd = L::kLd;
  constexpr int kChunks = HD / 8;    // 16-byte chunks per row
  constexpr int kDimTiles = HD / 8;  // n8 tiles of O
  constexpr int kWarpKeys = kTileKeys / KG;
  constexpr int kKeyTiles = kWarpKeys / 8;  // n8 tiles of S per warp and tile
  static_assert(kWarpKeys % 16 == 0);
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_k = reinterpret_cast<T*>(smem_raw);
  T* s_v = s_k + kStages * L::kStage;
  T* s_q = s_k + 2 * kStages * L::kStage;
  float* s_f = reinterpret_cast<float*>(smem_raw);  // after the key loop: O tiles, partial rows
  __shared__ int s_lo[kRowsCap], s_hi[kRowsCap];
  __shared__ int s_red[kMaxWarps][3];  // per warp: min key, max key, min fresh key
  __shared__ int s_seg_end, s_page0;
  __shared__ float s_ml[kMaxWarps][2][16];  // KG merge: a key group's max and sum per row
  // Per stage, the offsets (page, slot, KV head) of the keys of the tile copied into it; -1: no
  // visible key.
  __shared__ int64_t s_off[kStages * kTileKeys];

  const int n_threads = blockDim.x, n_warps = n_threads >> 5;
  const int m_tiles = n_warps / KG;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int mt = warp / KG, kg = warp - mt * KG;
  const int g = lane >> 2, c = lane & 3;
  const int rows_cap = m_tiles * 16;
  const CtaQueries cq = cta_queries(p);
  const int kv_head = cq.kv_head, h_begin = cq.h_begin, nh = cq.nh, split = cq.split;
  const int t_end = cq.t_end;
  int t = cq.t_begin;

  bool waited = false;
  while (t < t_end) {
    __syncthreads();  // the previous segment is done with the shared arrays
    // The rows' key ranges (metadata uploaded before the previous kernel started: read before
    // pdl_wait), one thread per row, reduced over the CTA.
    int kmin_i = INT_MAX, kmax_i = 0, fresh_i = INT_MAX;
    if (threadIdx.x < rows_cap) {
      const int i = threadIdx.x;
      const int row_i = row_of_token(p.q_indptr, p.n_rows, t);
      const int q_begin = p.q_indptr[row_i], q_end = p.q_indptr[row_i + 1];
      const int page0 = p.page_indptr[row_i], page1 = p.page_indptr[row_i + 1];
      const int kv_len = p.kv_lens[row_i];
      const int seg_end_i = min(t_end, q_end);
      const bool valid = i < (seg_end_i - t) * nh;
      int key_lo = 0, key_hi = 0;  // padding rows of an m16 tile see no key
      if (valid) {
        const int pos = p.q_pos[t + i / nh];
        key_hi = min(kv_len, (page1 - page0) * p.page_size);
        if (p.causal) key_hi = min(key_hi, pos + 1);
        key_lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
        // The row's new tokens are its last keys, at their positions: the kernel before this
        // one may write the keys from here on, not the ones below (ops/attention.h).
        fresh_i = max(0, min(kv_len - (q_end - q_begin), pos));
      }
      s_lo[i] = key_lo;
      s_hi[i] = max(key_hi, key_lo);
      if (key_hi > key_lo) {
        kmin_i = key_lo;
        kmax_i = key_hi;
      }
      if (i == 0) {
        s_seg_end = seg_end_i;
        s_page0 = page0;
      }
    }
    kmin_i = __reduce_min_sync(device::kFullMask, kmin_i);
    kmax_i = __reduce_max_sync(device::kFullMask, kmax_i);
    fresh_i = __reduce_min_sync(device::kFullMask, fresh_i);
    if (lane == 0) {
      s_red[warp][0] = kmin_i;
      s_red[warp][1] = kmax_i;
      s_red[warp][2] = fresh_i;
    }
    __syncthreads();
    const int seg_end = s_seg_end;
    if (seg_end <= t) break;  // malformed q_indptr: never loop forever
    const int n_q = (seg_end - t) * nh;
    int kmin = INT_MAX, kmax = 0, fresh = INT_MAX;
    for (int w = 0; w < n_warps; ++w) {
      kmin = min(kmin, s_red[w][0]);
      kmax = max(kmax, s_red[w][1]);
      fresh = min(fresh, s_red[w][2]);
    }
    if (kmin >= kmax) kmin = kmax = 0;
    const int32_t* row_pages = p.page_indices + s_page0;
    const int tile0 = kmin / kTileKeys;
    const int n_tiles = kmax > kmin ? (kmax - 1) / kTileKeys + 1 - tile0 : 0;
    const int begin = tile0 + static_cast<int>(int64_t{split} * n_tiles / p.n_splits);
    const int end = tile0 + static_cast<int>(int64_t{split + 1} * n_tiles / p.n_splits);

    // The offset of key j's row (-1 if no row sees it), and the copies of the chunks of tile
    // `tile` (offsets in s_off[stage]) whose keys are in [key_lo, key_hi) into `stage` (zero: the
    // chunks without a key are filled with zeros).
    auto key_offset = [&](int j) { return key_row_offset(p, row_pages, kv_head, kmin, kmax, j); };
    auto copy = [&](int tile, int stage, int key_lo, int key_hi, bool zero) {
      T* dk = s_k + stage * L::kStage;
      T* dv = s_v + stage * L::kStage;
      for (int idx = threadIdx.x; idx < kTileKeys * kChunks; idx += n_threads) {
        const int jj = idx / kChunks, cc = idx % kChunks, j = tile * kTileKeys + jj;
        copy_kv_chunk(p, s_off[stage * kTileKeys + jj], j, cc, key_lo, key_hi, zero,
                      dk + jj * kLd + cc * 8, dv + jj * kLd + cc * 8);
      }
    };

    // The first kStages tiles are copied before the wait, except the keys the kernel before this
    // one may write (this step's tokens: from `fresh` on, first segment only), which follow right
    // after it, together with q. One cp.async group: the first kStages tiles and q.
    const int split_key = waited ? INT_MAX : fresh;
    for (int e = threadIdx.x; e < kStages * kTileKeys; e += n_threads) {
      const int tile_e = begin + e / kTileKeys;
      s_off[e] = tile_e < end ? key_offset(tile_e * kTileKeys + e % kTileKeys) : -1;
    }
    __syncthreads();
#pragma unroll
    for (int st = 0; st < kStages; ++st)
      if (begin + st < end) copy(begin + st, st, INT_MIN, split_key, true);
    if (!waited) {
      pdl_wait();  // q and this step's K/V are written by the kernel before this one
      pdl_launch_dependents();
      waited = true;
    }
    for (int idx = threadIdx.x; idx < rows_cap * kChunks; idx += n_threads) {
      const int i = idx / kChunks, cc = idx - i * kChunks;
      T* dst = s_q + i * kLd + cc * 8;
      if (i < n_q) {
        const int64_t tok = t + i / nh, h = h_begin + i % nh;
        device::cp_async16(dst, static_cast<const T*>(p.q) + tok * p.q_stride_token +
                                    h * p.q_stride_head + cc * 8);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
    if (split_key != INT_MAX) {
#pragma unroll
      for (int st = 0; st < kStages; ++st)
        if (begin + st < end) copy(begin + st, st, split_key, INT_MAX, false);
    }
    device::cp_async_commit();

    const bool has_rows = mt * 16 < n_q;
    float o[kDimTiles][4];
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};  // rows g and g + 8
    const int r0 = mt * 16;
    const int lo_r[2] = {s_lo[r0 + g], s_lo[r0 + g + 8]};
    const int hi_r[2] = {s_hi[r0 + g], s_hi[r0 + g + 8]};
    const int lrow = lane & 7, lmat = lane >> 3;
    const T* qrow = s_q + (r0 + (lmat & 1) * 8 + lrow) * kLd + (lmat >> 1) * 8;

    for (int tile = begin; tile < end; ++tile) {
      const int idx = tile - begin, stage = idx % kStages;
      // Groups committed after this tile's: the refills of the tiles after it (a refill of tile
      // u + kStages is issued after tile u's math).
      const int refills = max(0, min(idx, end - begin - kStages));
      const int newer = idx < kStages ? refills : refills - (idx - kStages) - 1;
      if (newer <= 0)
        device::cp_async_wait<0>();
      else if (newer == 1)
        device::cp_async_wait<1>();
      else
        device::cp_async_wait<kStages - 1>();
      __syncthreads();
      // The key offsets of the tile kStages on (copied into this stage after this tile's math):
      // loaded now, stored below, so the page lookup overlaps the math.
      const bool refill = tile + kStages < end;
      int64_t next_off[2] = {-1, -1};
      if (refill) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = threadIdx.x + r * n_threads;
          if (e < kTileKeys) next_off[r] = key_offset((tile + kStages) * kTileKeys + e);
        }
      }
      if (has_rows) {
        const int kw0 = tile * kTileKeys + kg * kWarpKeys;  // this warp's first key
        const T* kt = s_k + stage * L::kStage + kg * kWarpKeys * kLd;
        const T* vt = s_v + stage * L::kStage + kg * kWarpKeys * kLd;
        float s[kKeyTiles][4] = {};  // keys kw0 + 8 nt + 2c (+1), rows g / g + 8
        // Q's A fragment: matrices (rows 0-7 | 8-15) x (columns kk | kk + 8); K's B fragments of
        // two n8 tiles: (keys 0-7: columns kk | kk + 8), (keys 8-15: the same).
        const T* krow = kt + ((lmat >> 1) * 8 + lrow) * kLd + (lmat & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < HD; kk += 16) {
          uint32_t a[4];
          device::ldmatrix_x4(a, qrow + kk);
#pragma unroll
          for (int np = 0; np < kKeyTiles / 2; ++np) {
            uint32_t b[4];
            device::ldmatrix_x4(b, krow + np * 16 * kLd + kk);
            device::mma<T>(s[2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
            device::mma<T>(s[2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
          }
        }
        uint32_t pa[kKeyTiles][2];  // P by n8 tile: rows g / g + 8, keys 2c, 2c + 1
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float x[kKeyTiles][2];
          float mx = -INFINITY;
#pragma unroll
          for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = kw0 + nt * 8 + 2 * c + e;
              float v = s[nt][2 * r + e] * p.scale;
              if (p.softcap > 0.0f) v = p.softcap * tanhf(v / p.softcap);
              x[nt][e] = (j >= lo_r[r] && j < hi_r[r]) ? v * kLog2e : -INFINITY;
              mx = fmaxf(mx, x[nt][e]);
            }
          }
          mx = fmaxf(mx, __shfl_xor_sync(device::kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(device::kFullMask, mx, 2));
          const float m_new = fmaxf(m_r[r], mx);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // no key seen yet: all zeros
          const float alpha = exp2f(m_r[r] - m_use);
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < kKeyTiles; ++nt) {
            const float p0 = exp2f(x[nt][0] - m_use), p1 = exp2f(x[nt][1] - m_use);
            sum += p0 + p1;
            pa[nt][r] = device::pack2<T>(p0, p1);
          }
          l_r[r] = l_r[r] * alpha + sum;
          m_r[r] = m_new;
#pragma unroll
          for (int dt = 0; dt < kDimTiles; ++dt) {
            o[dt][2 * r] *= alpha;
            o[dt][2 * r + 1] *= alpha;
          }
        }
        // P.V per k16 step (keys 16 ks .. of the warp): P's A fragment from n8 tiles 2 ks, 2 ks +
        // 1; V's B fragments, two n8 tiles of head_dim per transposed ldmatrix.
#pragma unroll
        for (int ks = 0; ks < kKeyTiles / 2; ++ks) {
          const T* vrow = vt + (ks * 16 + (lmat & 1) * 8 + lrow) * kLd + (lmat >> 1) * 8;
#pragma unroll
          for (int dt = 0; dt < kDimTiles; dt += 2) {
            uint32_t b[4];
            device::ldmatrix_x4_trans(b, vrow + dt * 8);
            device::mma<T>(o[dt], pa[2 * ks][0], pa[2 * ks][1], pa[2 * ks + 1][0],
                           pa[2 * ks + 1][1], b[0], b[1]);
            device::mma<T>(o[dt + 1], pa[2 * ks][0], pa[2 * ks][1], pa[2 * ks + 1][0],
                           pa[2 * ks + 1][1], b[2], b[3]);
          }
        }
      }
      if (refill) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = threadIdx.x + r * n_threads;
          if (e < kTileKeys) s_off[stage * kTileKeys + e] = next_off[r];
        }
      }
      __syncthreads();  // everyone is done with this stage before it is refilled
      if (refill) {
        copy(tile + kStages, stage, INT_MIN, INT_MAX, true);
        device::cp_async_commit();
      }
    }
    device::cp_async_wait<0>();  // no tile: q's copies may still be in flight
    __syncthreads();             // the K/V stages are free

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l_r[r] += __shfl_xor_sync(device::kFullMask, l_r[r], 1);
      l_r[r] += __shfl_xor_sync(device::kFullMask, l_r[r], 2);
    }
    // The key groups of an m16 tile, merged into group 0 in group order.
    if constexpr (KG > 1) {
      for (int round = 1; round < KG; ++round) {
        float* s_o = s_f + mt * 16 * L::kOutLd;
        if (kg == round && has_rows) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = g + 8 * r;
            if (c == 0) {
              s_ml[mt][0][i] = m_r[r];
              s_ml[mt][1][i] = l_r[r];
            }
#pragma unroll
            for (int dt = 0; dt < kDimTiles; ++dt) {
              s_o[i * L::kOutLd + dt * 8 + 2 * c] = o[dt][2 * r];
              s_o[i * L::kOutLd + dt * 8 + 2 * c + 1] = o[dt][2 * r + 1];
            }
          }
        }
        __syncthreads();
        if (kg == 0 && has_rows) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = g + 8 * r;
            const float m_w = s_ml[mt][0][i], l_w = s_ml[mt][1][i];
            const float m_new = fmaxf(m_r[r], m_w);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float fa = exp2f(m_r[r] - m_use), fb = exp2f(m_w - m_use);
            l_r[r] = l_r[r] * fa + l_w * fb;
            m_r[r] = m_new;
#pragma unroll
            for (int dt = 0; dt < kDimTiles; ++dt) {
              o[dt][2 * r] = o[dt][2 * r] * fa + s_o[i * L::kOutLd + dt * 8 + 2 * c] * fb;
              o[dt][2 * r + 1] =
                  o[dt][2 * r + 1] * fa + s_o[i * L::kOutLd + dt * 8 + 2 * c + 1] * fb;
            }
          }
        }
        __syncthreads();
      }
    }

    // Key group 0 writes its rows: normalised (one split), into the cluster's shared partial rows,
    // or as partial rows for the combine kernel.
    const bool cluster = p.cluster && p.n_splits > 1;
    if (kg == 0 && has_rows) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = r0 + g + 8 * r;
        if (i >= n_q) continue;
        const int64_t tok = t + i / nh, h = h_begin + i % nh;
        if (p.n_splits == 1) {
          const float inv = l_r[r] > 0.0f ? 1.0f / l_r[r] : 0.0f;
          const int64_t base = tok * p.out_stride_token + h * p.out_stride_head + 2 * c;
#pragma unroll
          for (int dt = 0; dt < kDimTiles; ++dt) {
            device::store_float(p.out, base + dt * 8, p.out_kind, o[dt][2 * r] * inv);
            device::store_float(p.out, base + dt * 8 + 1, p.out_kind, o[dt][2 * r + 1] * inv);
          }
        } else {
          float* part = cluster
                            ? s_f + i * L::kPartLd
                            : p.part + ((tok * p.n_heads + h) * p.n_splits + split) * L::kPartLd;
#pragma unroll
          for (int dt = 0; dt < kDimTiles; ++dt) {
            part[dt * 8 + 2 * c] = o[dt][2 * r];
            part[dt * 8 + 2 * c + 1] = o[dt][2 * r + 1];
          }
          if (c == 0) {
            part[HD] = m_r[r];
            part[HD + 1] = l_r[r];
          }
        }
      }
    }
    if (cluster) merge_splits_cluster<HD>(p, s_f, n_q, t, nh, h_begin, n_warps);
    t = seg_end;
  }
  if (!waited) pdl_wait();  // the grid completes after the kernel before it, always
}

template <typename T, int HD, int KG>
void launch(Context& ctx, const AttentionArgs<T>& a, dim3 grid, int warps) {
  using L = RowsLayout<HD>;
  allow_dynamic_smem<&attention_rows_kernel<T, HD, KG>>(L::bytes(kRowsCap));
  const OpProfileScope profile(ctx, "paged_attention_rows()");  // also inside paged_attention
  const size_t smem = L::bytes(warps / KG * 16);
  launch_pdl_cluster(attention_rows_kernel<T, HD, KG>, grid,
                     dim3(static_cast<unsigned>(warps * 32)), smem, stream_of(ctx),
                     dim3(1, 1, a.cluster ? grid.z : 1), a);
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

template <typename T, int HD>
void launch_groups(Context& ctx, const AttentionArgs<T>& a, dim3 grid, int warps, int key_groups) {
  if (key_groups == 4)
    launch<T, HD, 4>(ctx, a, grid, warps);
  else if (key_groups == 2)
    launch<T, HD, 2>(ctx, a, grid, warps);
  else
    launch<T, HD, 1>(ctx, a, grid, warps);
}

}  // namespace

template <typename TKV>
bool launch_attention_rows(Context& ctx, const AttentionArgs<TKV>& a, dim3 grid, int warps,
                           int key_groups) {
  if constexpr (std::is_same_v<TKV, float>) {
    return false;
  } else {
    const auto kind =
        std::is_same_v<TKV, __half> ? device::FloatKind::f16 : device::FloatKind::bf16;
    if (a.q_kind != kind || !a.vec_kv || compute_major() < 8) return false;
    if (!device::is_aligned16(a.q) || a.q_stride_token % 8 != 0 || a.q_stride_head % 8 != 0)
      return false;
    if (warps < 1 || warps > kMaxWarps || warps % key_groups != 0) return false;
    switch (a.head_dim) {
      case 64:
        launch_groups<TKV, 64>(ctx, a, grid, warps, key_groups);
        return true;
      case 128:
        launch_groups<TKV, 128>(ctx, a, grid, warps, key_groups);
        return true;
      default:
        return false;
    }
  }
}

template bool launch_attention_rows<float>(Context&, const AttentionArgs<float>&, dim3, int, int);
template bool launch_attention_rows<__nv_bfloat16>(Context&, const AttentionArgs<__nv_bfloat16>&,
                                                   dim3, int, int);
template bool launch_attention_rows<__half>(Context&, const AttentionArgs<__half>&, dim3, int, int);

}  // namespace attn

uint64_t attention_rows_launches() {
  return attn::g_launches.load(std::memory_order_relaxed);
}

}  // namespace dspark::cuda
