// The stream-K few-rows linear kernel (verify and draft steps; gemv.h, try_gemv_streamk):
// y[M, N] = x[M, K] . w[N, K]^T (+ bias) for 1-48 rows of x and 16-bit weights, on sm_90 tensor
// cores, as a programmatic dependent that requests its first weights while the kernel before it
// still runs. Why: cuBLASLt's kernels at these shapes (M = 17: a verify of 16 drafts) leave SMs
// idle on the narrow weights (96 CTAs on q/k/v, 64 on o; session 8), need a split-K reduce kernel
// for o and down, and never wait for programmatic dependencies, so each of a verify forward's 144
// GEMMs starts only after the kernel before it ends: session 11 measured what that start costs
// (0.35 ms per verify forward, with an unsafe programmatic edge into them).
//  - Work: the weight is cut into tiles of 64 rows (four m16 MMA tiles) and each tile's K into
//    blocks of BK = 128 (or 256: set_streamk_block_k, not yet run on a GPU): an item is (tile,
//    K block), 16 (32) KB of weights, and the items are numbered tile-major. The grid has one CTA
//    (8 warps) per multiprocessor and CTA c takes the contiguous items [c I / G, (c + 1) I / G):
//    every CTA streams the same bytes, up to one item, whatever N and K are (stream-K). A CTA's
//    range covers whole tiles and at most two partial ones (its first and its last).
//  - Pipeline: items go through a ring of S shared-memory stages (S - 1 in flight). Weights by TMA:
//    BK / 64 boxes of 64 x 64 per item with the 128-byte swizzle, issued by one thread, completing
//    on the stage's mbarrier; x's M x BK slice by cp.async (rows padded by 16 bytes, then one zero
//    row for the MMA's padding tokens). The weights of the first S - 1 items are requested before
//    pdl_wait() (weights are never written by a forward), x's after it. One barrier per item
//    frees the previous stage. The loop has no divisions: stages, tiles and K blocks are counted.
//  - Math: warp w = (row half h, K quarter q) multiplies rows 32 h .. 32 h + 31 by K columns
//    [q BK / 4, (q + 1) BK / 4) of every item: A fragments (weights) and B fragments (x) by
//    ldmatrix from offsets computed once, MMAs m16n8k16 with f32 accumulation into 2 x NT tiles (NT
//    = ceil(M / 8)).
//  - At the end of a tile's items the 4 K quarters meet in shared memory and are added in order. A
//    CTA that covered the whole tile writes y (+ bias). Otherwise it writes its partial sums
//    (f32, [M][64]) to its own slot (first or last tile of its range) and, after a barrier, one
//    thread adds 1 to the tile's arrival counter with release / acquire semantics; the CTA that
//    arrives last adds the tile's partials in CTA order (+ bias), writes y and sets the counter
//    back to 0 (arrival_counters.h).
// The summation order depends on (M, N, K, the SM count) only: the same bits on every call.
// DSPARK_CUDA_GEMV_STREAMK_STAGES (2-8, read once) and set_streamk_block_k /
// DSPARK_CUDA_GEMV_STREAMK_BK are measurement knobs.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/sync.cuh"
#include "dspark/backend/cuda/device/tma.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/arrival_counters.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kWarpsS = 8;
constexpr int kThreadsS = kWarpsS * 32;
constexpr int kTileRows = 64;                      // weight rows per tile: 4 m16 tiles
constexpr int kQuarters = 4;                       // K quarters of an item, one per warp column
constexpr int kBox = 64;                           // TMA boxes of 64 x 64: 128-byte rows
constexpr int kBoxBytes = kBox * kBox * 2;         // 8 KB
constexpr int kMaxTilesS = kGemvMaxN / kTileRows;  // arrival counters
constexpr int kMaxNT = kGemvStreamKMaxRows / 8;    // token tiles of the MMA
constexpr int kMaxStagesS = 8;                     // cp.async.wait_group takes a constant
constexpr int kDefaultStagesS = 8;
constexpr size_t kSmemBudget = 200 * 1024;  // leaves room for a small kernel beside it
static_assert(kGemvStreamKMaxRows % 8 == 0 && kWarpsS == 2 * kQuarters);

// K per item, BK: 128 or 256 (two or four boxes: 16 or 32 KB of weights; 256 halves the loop's
// work per byte, 128 balances the grid better on small weights).
template <int BK>
struct BlockK {
  static constexpr int kBoxes = BK / kBox;
  static constexpr int kWStageBytes = kBoxes * kBoxBytes;
  static constexpr int kLdX = BK + 8;                 // x's shared row pitch, elements
  static constexpr int kSteps = BK / kQuarters / 16;  // k16 steps per warp and item
  static constexpr int kXChunks = (kGemvStreamKMaxRows * BK / 8 + kThreadsS - 1) / kThreadsS;
  static_assert(BK == 128 || BK == 256);
};

template <typename TW, typename TY>
struct StreamKParams {
  CUtensorMap w_map;  // w [N][K] for TMA: boxes of 64 x 64, 128-byte swizzle
  const TW* x;        // [M, K], row stride ldx
  TY* y;              // [M, N], row stride ldy
  const void* bias;   // [N] or null
  device::FloatKind bias_kind;
  int64_t ldx, ldy;
  int m;
  int kblocks;         // K / BK: items per tile
  int items;           // tiles x kblocks (items x grid < 2^31)
  int stages;          // S, 2..kMaxStagesS
  unsigned* counters;  // [kMaxTilesS], zero between launches
  float* part;         // [grid][2][M][kTileRows]: each CTA's partial sums of its first / last tile
};

// Shared memory, in bytes from a 1024-byte aligned base: the weight stages (S x 2 BK x 64), the x
// stages (S x (M + 1) rows of BK + 8: M rows of x, one of zeros), the K quarters' sums at the end
// of a tile ([4][M][64] f32), the stages' mbarriers.
struct SmemLayout {
  int x, x_stage, red, bars, total;
};
constexpr SmemLayout smem_layout(int m, int stages, int bk) {
  SmemLayout l{};
  l.x_stage = (m + 1) * (bk + 8) * 2;
  l.x = stages * (bk / kBox) * kBoxBytes;
  l.red = l.x + stages * l.x_stage;
  l.bars = l.red + kQuarters * kTileRows * m * static_cast<int>(sizeof(float));
  l.total = l.bars + kMaxStagesS * static_cast<int>(sizeof(uint64_t)) + 1024;  // + alignment
  return l;
}

// The CTA whose range holds item i (ranges [c I / G, (c + 1) I / G)).
__device__ __forceinline__ int owner_of(int i, int items, int grid) {
  return ((i + 1) * grid - 1) / items;
}

// cp.async.wait_group with a runtime count (0 .. kMaxStagesS - 2).
__device__ __forceinline__ void cp_async_wait_n(int n) {
  switch (n) {
    case 0:
      device::cp_async_wait<0>();
      break;
    case 1:
      device::cp_async_wait<1>();
      break;
    case 2:
      device::cp_async_wait<2>();
      break;
    case 3:
      device::cp_async_wait<3>();
      break;
    case 4:
      device::cp_async_wait<4>();
      break;
    case 5:
      device::cp_async_wait<5>();
      break;
    default:
      device::cp_async_wait<6>();
      break;
  }
  static_assert(kMaxStagesS - 2 == 6);
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// An item's place, advanced one item at a time: (tile, K block) and its ring stage.
struct Cursor {
  int tile, kb, stage;
  __device__ __forceinline__ void next(int kblocks, int stages) {
    if (++kb == kblocks) {
      kb = 0;
      ++tile;
    }
    if (++stage == stages) stage = 0;
  }
};

template <typename TW, typename TY, int NT, int BK>
__global__ void __launch_bounds__(kThreadsS, 1)
    gemv_streamk_kernel(const __grid_constant__ StreamKParams<TW, TY> p) {
  using B = BlockK<BK>;
  constexpr int kLdX = B::kLdX, kWStageBytes = B::kWStageBytes, kMaxXChunks = B::kXChunks;
  constexpr int kBlockK = BK;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ bool s_last;
  const int m = p.m, S = p.stages;
  const SmemLayout L = smem_layout(m, S, BK);
  unsigned char* smem = smem_raw + (1024 - device::smem_addr(smem_raw) % 1024) % 1024;
  float* s_red = reinterpret_cast<float*>(smem + L.red);
  uint64_t* s_full = reinterpret_cast<uint64_t*>(smem + L.bars);
  const unsigned w_base = device::smem_addr(smem), x_base = w_base + L.x;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, c = lane & 3, lrow = lane & 7, lmat = lane >> 3;
  const int half = warp / kQuarters, quarter = warp % kQuarters;
  const int grid = static_cast<int>(gridDim.x), cta = static_cast<int>(blockIdx.x);
  const int i0 = cta * p.items / grid, i1 = (cta + 1) * p.items / grid;
  const int n_items = i1 - i0;
  const Cursor start{i0 / p.kblocks, i0 % p.kblocks, 0};

  // Per-thread shared offsets, the same for every item: the A fragments (weight rows
  // 32 half + 16 mt + ..., in a box's 128-byte rows whose 16-byte chunks are permuted by the
  // row's low three bits: the 128-byte swizzle), the B fragments (token rows past M read the zero
  // row), and the thread's chunks of x.
  unsigned a_off[B::kSteps][2], b_off[B::kSteps][(NT + 1) / 2];
#pragma unroll
  for (int ks = 0; ks < B::kSteps; ++ks) {
    const int k = quarter * (BK / kQuarters) + ks * 16;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const int r = half * 32 + mt * 16 + (lmat & 1) * 8 + lrow, ka = k + (lmat >> 1) * 8;
      a_off[ks][mt] = (ka / kBox) * kBoxBytes + r * 128 + (((ka % kBox) / 8) ^ (r & 7)) * 16;
    }
#pragma unroll
    for (int pr = 0; pr < (NT + 1) / 2; ++pr) {
      const int tok = pr * 16 + (lmat >> 1) * 8 + lrow;
      b_off[ks][pr] = ((tok < m ? tok : m) * kLdX + k + (lmat & 1) * 8) * 2;
    }
  }
  int64_t x_src[kMaxXChunks];
  unsigned x_dst[kMaxXChunks];
#pragma unroll
  for (int q = 0; q < kMaxXChunks; ++q) {
    const int j = tid + q * kThreadsS, r = j / (kBlockK / 8), ch = j % (kBlockK / 8);
    x_src[q] = r * p.ldx + ch * 8;
    x_dst[q] = j < m * (kBlockK / 8) ? (r * kLdX + ch * 8) * 2 : ~0u;  // ~0: no chunk
  }

  auto load_w = [&](const Cursor& at) {  // thread 0
    uint64_t* bar = s_full + at.stage;
    unsigned char* dst = smem + at.stage * kWStageBytes;
    device::mbarrier_arrive_expect_tx(bar, kWStageBytes);
#pragma unroll
    for (int b = 0; b < B::kBoxes; ++b)
      device::tma_load_2d(dst + b * kBoxBytes, &p.w_map, at.kb * kBlockK + b * kBox,
                          at.tile * kTileRows, bar);
  };
  auto load_x = [&](const Cursor& at) {
    const TW* src = p.x + at.kb * kBlockK;
    const unsigned dst = x_base + at.stage * L.x_stage;
#pragma unroll
    for (int q = 0; q < kMaxXChunks; ++q)
      if (x_dst[q] != ~0u) device::cp_async16_at(dst + x_dst[q], src + x_src[q]);
  };

  // Before the wait: the zero rows, the barriers, the first S - 1 items' weights.
  for (int i = tid; i < S * (kLdX / 8); i += kThreadsS) {
    const int s = i / (kLdX / 8), ch = i % (kLdX / 8);
    *reinterpret_cast<uint4*>(smem + L.x + s * L.x_stage + m * kLdX * 2 + ch * 16) =
        make_uint4(0, 0, 0, 0);
  }
  if (tid == 0) {
    device::prefetch_tensor_map(&p.w_map);
    for (int s = 0; s < S; ++s) device::mbarrier_init(s_full + s, 1);
    device::fence_barrier_init();
  }
  __syncthreads();  // the barriers are initialised (and the zero rows written)
  Cursor ld = start;
  for (int s = 0; s < S - 1 && s < n_items; ++s, ld.next(p.kblocks, S))
    if (tid == 0) load_w(ld);
  pdl_wait();  // x (and y, the counters, the partials) belong to the kernels before this one
  pdl_launch_dependents();
  {
    Cursor xc = start;
    for (int s = 0; s < S - 1 && s < n_items; ++s, xc.next(p.kblocks, S)) load_x(xc);
  }
  device::cp_async_commit();  // one group: x of the first S - 1 items

  float acc[2][NT][4];
  auto clear = [&] {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  };
  clear();

  // The end of tile `tile`'s items in this CTA: the K quarters' sums in shared memory, then y or
  // the partial sums and the arrival. Four consecutive weight rows per thread and step.
  auto flush = [&](int tile) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = half * 32 + mt * 16 + g + (e >> 1) * 8, tok = nt * 8 + 2 * c + (e & 1);
          if (tok < m) s_red[(quarter * m + tok) * kTileRows + row] = acc[mt][nt][e];
        }
    __syncthreads();
    const int64_t row0 = int64_t{tile} * kTileRows;
    const int c_first = owner_of(tile * p.kblocks, p.items, grid);
    const int c_last = owner_of((tile + 1) * p.kblocks - 1, p.items, grid);
    const int n4 = m * kTileRows / 4;
    auto store4 = [&](int j4, float4 v) {
      const int tok = j4 / (kTileRows / 4), r = (j4 % (kTileRows / 4)) * 4;
      const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float out = vals[e];
        if (p.bias) out += device::load_float(p.bias, row0 + r + e, p.bias_kind);
        p.y[tok * p.ldy + row0 + r + e] = device::from_float<TY>(out);
      }
    };
    auto quarter_sum4 = [&](int j4) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int q = 0; q < kQuarters; ++q)
        v = add4(v, reinterpret_cast<const float4*>(s_red + q * m * kTileRows)[j4]);
      return v;
    };
    if (c_first == c_last) {  // the whole tile is this CTA's
      for (int j4 = tid; j4 < n4; j4 += kThreadsS) store4(j4, quarter_sum4(j4));
      return;
    }
    auto part4 = [&](int owner, int slot) {
      return reinterpret_cast<float4*>(p.part +
                                       static_cast<int64_t>(owner * 2 + slot) * m * kTileRows);
    };
    float4* mine = part4(cta, tile == start.tile ? 0 : 1);
    for (int j4 = tid; j4 < n4; j4 += kThreadsS) mine[j4] = quarter_sum4(j4);
    __syncthreads();  // every thread's partials, before the release
    if (tid == 0)
      s_last =
          device::atomic_inc_acq_rel(p.counters + tile) == static_cast<unsigned>(c_last - c_first);
    __syncthreads();
    if (!s_last) return;
    for (int j4 = tid; j4 < n4; j4 += kThreadsS) {
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int cc = c_first; cc <= c_last; ++cc) {  // CTA (K) order
        const int slot = tile == cc * p.items / grid / p.kblocks ? 0 : 1;
        v = add4(v, __ldcg(part4(cc, slot) + j4));
      }
      store4(j4, v);
    }
    if (tid == 0) p.counters[tile] = 0;  // ready for the next launch
  };

  Cursor cur = start;
  unsigned parity = 0;  // of the current stage's barrier phase
  for (int it = 0; it < n_items; ++it) {
    if (it == 0)
      device::cp_async_wait<0>();  // the prologue's copies of x
    else
      cp_async_wait_n(S - 2);  // item it's x, committed S - 1 items ago
    device::mbarrier_wait(s_full + cur.stage, parity);
    __syncthreads();  // item it is visible; every warp is done with item it - 1's stage
    if (it + S - 1 < n_items) {
      if (tid == 0) load_w(ld);
      load_x(ld);
      ld.next(p.kblocks, S);
    }
    device::cp_async_commit();

    const unsigned ws = w_base + cur.stage * kWStageBytes, xs = x_base + cur.stage * L.x_stage;
#pragma unroll
    for (int ks = 0; ks < B::kSteps; ++ks) {
      uint32_t b[NT][2];
#pragma unroll
      for (int pr = 0; pr < (NT + 1) / 2; ++pr) {
        // Matrices (tokens 16 pr + 0-7 | + 8-15) x (k | k + 8): two n8 B fragments.
        uint32_t r[4];
        device::ldmatrix_x4_at(r, xs + b_off[ks][pr]);
        b[2 * pr][0] = r[0];
        b[2 * pr][1] = r[1];
        if (2 * pr + 1 < NT) {
          b[2 * pr + 1][0] = r[2];
          b[2 * pr + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        // Matrices (rows 16 mt + 0-7 | + 8-15) x (k | k + 8): the A fragment.
        uint32_t a[4];
        device::ldmatrix_x4_at(a, ws + a_off[ks][mt]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          device::mma<TW>(acc[mt][nt], a[0], a[1], a[2], a[3], b[nt][0], b[nt][1]);
      }
    }

    if (cur.kb == p.kblocks - 1 || it == n_items - 1) {
      flush(cur.tile);
      clear();
    }
    if (cur.stage == S - 1) parity ^= 1u;
    cur.next(p.kblocks, S);
  }
}

template <typename TW, typename TY, int NT, int BK>
void launch_bk(const StreamKParams<TW, TY>& p, unsigned grid, cudaStream_t stream) {
  allow_dynamic_smem<&gemv_streamk_kernel<TW, TY, NT, BK>>(kSmemBudget);
  launch_pdl(gemv_streamk_kernel<TW, TY, NT, BK>, dim3(grid), dim3(kThreadsS),
             static_cast<size_t>(smem_layout(p.m, p.stages, BK).total), stream, p);
}

template <typename TW, typename TY, int NT>
void launch_streamk(const StreamKParams<TW, TY>& p, int bk, unsigned grid, cudaStream_t stream) {
  if (bk == 256)
    launch_bk<TW, TY, NT, 256>(p, grid, stream);
  else
    launch_bk<TW, TY, NT, 128>(p, grid, stream);
}

// On unless the environment has DSPARK_CUDA_GEMV_STREAMK=0 (read once) or after
// set_streamk_linear(false).
std::atomic<int>& streamk_flag() {
  static std::atomic<int> flag = env_switch("DSPARK_CUDA_GEMV_STREAMK", false) ? 1 : 0;
  return flag;
}

// K per item (set_streamk_block_k; DSPARK_CUDA_GEMV_STREAMK_BK=256, read once): 128 or 256.
std::atomic<int>& block_k_flag() {
  static std::atomic<int> bk = [] {
    const char* s = std::getenv("DSPARK_CUDA_GEMV_STREAMK_BK");
    return s && std::atoi(s) == 256 ? 256 : 128;
  }();
  return bk;
}

// cuTensorMapEncodeTiled from the driver, looked up once through the runtime (no link against
// libcuda); null when the driver does not have it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// w [N][K] as a 2-D tensor map of 64 x 64 boxes with the 128-byte swizzle; false if the driver
// declines.
bool encode_weight_map(CUtensorMap& map, const void* w, DType dtype, int64_t n, int64_t k) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {kBox, kBox};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(&map,
                dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                2, const_cast<void*>(w), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

void set_streamk_linear(bool enabled) {
  streamk_flag().store(enabled ? 1 : 0);
}

bool streamk_linear_enabled() {
  return streamk_flag().load() != 0;
}

void set_streamk_block_k(int block_k) {
  block_k_flag().store(block_k == 256 ? 256 : 128);
}

int streamk_block_k() {
  return block_k_flag().load();
}

bool try_gemv_streamk(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& y) {
  if (!streamk_linear_enabled() || !gemv_tile::fits_16bit(x, w, y)) return false;
  const gemv_tile::LinearDims d = gemv_tile::linear_dims(x, w, y);
  if (d.m < 1 || d.m > kGemvStreamKMaxRows || d.n % kTileRows != 0 || d.n > kGemvMaxN ||
      d.k % 128 != 0 || compute_major() < 9)
    return false;
  const int sms = sm_count();
  // K per item: 128, or 256 where K allows it when set_streamk_block_k(256) asked for it.
  const int64_t tiles = d.n / kTileRows;
  const int bk = block_k_flag().load() == 256 && d.k % 256 == 0 ? 256 : 128;
  const int64_t kblocks = d.k / bk, items = tiles * kblocks;
  if (items * sms >= (int64_t{1} << 31)) return false;  // the kernel's item arithmetic is 32-bit
  CUtensorMap map{};
  if (!encode_weight_map(map, w.data(), x.dtype(), d.n, d.k)) return false;
  const size_t part_floats = static_cast<size_t>(sms) * 2 * kGemvStreamKMaxRows * kTileRows;
  unsigned* buf = arrival_counters(ctx, ArrivalPool::linear_streamk, kMaxTilesS + part_floats);
  if (buf == nullptr) return false;  // first use inside a graph capture: cuBLASLt this time
  // Pipeline stages (DSPARK_CUDA_GEMV_STREAMK_STAGES, 2..8, read once; a measurement knob), fewer
  // when the shared memory would not fit.
  static const int requested = [] {
    const char* s = std::getenv("DSPARK_CUDA_GEMV_STREAMK_STAGES");
    const int v = s ? std::atoi(s) : 0;
    return v > 0 ? std::clamp(v, 2, kMaxStagesS) : kDefaultStagesS;
  }();
  const int m = static_cast<int>(d.m);
  int stages = requested;
  while (stages > 2 && static_cast<size_t>(smem_layout(m, stages, bk).total) > kSmemBudget)
    --stages;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(sms, items));
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  gemv_tile::dispatch_16bit(
      x.dtype(), y.dtype(), [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
        using DW = device_t<TW>;
        using DY = device_t<TY>;
        const StreamKParams<DW, DY> p{map,
                                      device_ptr<TW>(x),
                                      device_ptr<TY>(y),
                                      b.data,
                                      b.kind,
                                      d.ldx,
                                      d.ldy,
                                      m,
                                      static_cast<int>(kblocks),
                                      static_cast<int>(items),
                                      stages,
                                      buf,
                                      reinterpret_cast<float*>(buf + kMaxTilesS)};
        switch (ceil_div(d.m, 8)) {
          case 1:
            return launch_streamk<DW, DY, 1>(p, bk, grid, stream);
          case 2:
            return launch_streamk<DW, DY, 2>(p, bk, grid, stream);
          case 3:
            return launch_streamk<DW, DY, 3>(p, bk, grid, stream);
          case 4:
            return launch_streamk<DW, DY, 4>(p, bk, grid, stream);
          case 5:
            return launch_streamk<DW, DY, 5>(p, bk, grid, stream);
          default:
            return launch_streamk<DW, DY, kMaxNT>(p, bk, grid, stream);
        }
      });
  return true;
}

}  // namespace dspark::cuda
