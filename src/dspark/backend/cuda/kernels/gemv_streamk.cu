// The stream-K few-rows linear kernel (verify and draft steps; gemv.h, try_gemv_streamk):
// y[M, N] = x[M, K] . w[N, K]^T (+ bias) for 1-48 rows of x and 16-bit weights, on Hopper's
// warpgroup MMAs (sm_90a), as a programmatic dependent that requests its first weights while the
// kernel before it still runs. Why: cuBLASLt's kernels at these shapes (M = 17: a verify of 16
// drafts) leave SMs idle on the narrow weights (96 CTAs on q/k/v, 64 on o; session 8), need a
// split-K reduce kernel for o and down, and never wait for programmatic dependencies, so each of a
// verify forward's 144 GEMMs starts only after the kernel before it ends (session 11: 0.35 ms per
// verify forward).
//  - Work: the weight is cut into tiles of 128 rows and each tile's K into blocks of 64: an item
//    is (tile, K block), 16 KB of weights, numbered tile-major. The grid has one CTA per
//    multiprocessor and CTA c takes the contiguous items [c I / G, (c + 1) I / G): every CTA
//    streams the same bytes, up to one item, whatever N and K are (stream-K). A CTA's range covers
//    whole tiles and at most two partial ones (its first and its last).
//  - Warps: one producer warp and two consumer warpgroups (8 warps), through a ring of S stages
//    with a full and an empty mbarrier each. The producer's one thread issues, per item, two TMA
//    boxes of 64 x 64 weights (rows 0-63 and 64-127 of the tile) and one box of x (64 columns x
//    NP rows, NP = M rounded up to 8: the rows past M and the columns past K come as zeros), with
//    the 128-byte swizzle that the MMAs read. The weights of the first S items are requested before
//    pdl_wait() (weights are never written by a forward), x's after it. Then it waits for each
//    stage's release before refilling it.
//  - Math: warpgroup h multiplies the tile's rows 64 h .. 64 h + 63 by the item's x: four
//    wgmma.m64nNPk16 (device/wgmma.cuh) with f32 accumulation in registers (NP / 2 per thread). One
//    batch of MMAs stays in flight: each consumer warp releases an item's stage once the next
//    item's MMAs are issued. No barrier over the CTA per item. (Session 14: with a wait for every
//    item's MMAs it was 5-20% slower at 16-33 rows.)
//  - At the end of a tile's items: a CTA that covered the whole tile writes y (+ bias) from its
//    registers. Otherwise it writes its partial sums (f32, [M][tile rows]) to its own slot (first
//    or last tile of its range) and, after a barrier of the consumers, one thread adds 1 to the
//    tile's arrival counter with release / acquire semantics; the CTA that arrives last adds the
//    tile's partials in CTA order (+ bias; each CTA's values loaded together: one L2 round trip per
//    CTA, not per value, session 14), writes y and sets the counter back to 0 (arrival_counters.h).
// The summation order depends on (M, N, K, the SM count) only: the same bits on every call.
// DSPARK_CUDA_GEMV_STREAMK_STAGES (2-12), _MAX_N (the widest linear it takes) and _PDL (0: a plain
// launch), each read once, are measurement knobs. (Session 14 also measured tiles of 256 rows, two
// boxes per warpgroup: slower at every shape, removed.)
// (Session 13's form of this kernel, 8 warps that each loaded x by cp.async and multiplied by
// ldmatrix + mma.sync with a CTA barrier per item, was instruction-latency bound:
// docs/perf-notes.md.)
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/sync.cuh"
#include "dspark/backend/cuda/device/tma.cuh"
#include "dspark/backend/cuda/device/wgmma.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/arrival_counters.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kConsumerWarps = 8;  // two warpgroups
constexpr int kConsumers = kConsumerWarps * 32;
constexpr int kThreadsS = kConsumers + 32;         // + the producer warp
constexpr int kBlockK = 64;                        // K per item: one box of 128-byte rows
constexpr int kBoxBytes = 64 * kBlockK * 2;        // 8 KB: 64 weight rows
constexpr int kTileRows = 128;                     // 64 weight rows per warpgroup
constexpr int kMaxTilesS = kGemvMaxN / kTileRows;  // arrival counters
constexpr int kMaxStagesS = 12;
constexpr int kDefaultStagesS = 8;
constexpr size_t kSmemBudget = 200 * 1024;  // leaves room for a small kernel beside it
static_assert(kGemvStreamKMaxRows % 8 == 0 && kGemvStreamKMaxRows <= 48);

template <typename TY>
struct StreamKParams {
  CUtensorMap w_map;  // w [N][K]: boxes of 64 x 64, 128-byte swizzle
  CUtensorMap x_map;  // x [M][K] (row stride ldx): boxes of 64 columns x NP rows, the same swizzle
  TY* y;              // [M, N], row stride ldy
  const void* bias;   // [N] or null
  device::FloatKind bias_kind;
  int64_t ldy;
  int m, n;
  int kblocks;         // ceil(K / 64): items per tile
  int items;           // tiles x kblocks (items x grid < 2^31)
  int stages;          // S, 2..kMaxStagesS
  unsigned* counters;  // [kMaxTilesS], zero between launches
  float* part;         // [grid][2][M][kTileRows]: each CTA's partial sums of its first / last tile
};

// Shared memory, in bytes from a 1024-byte aligned base: the weight stages (S x 128 rows of 128
// bytes), the x stages (S x NP rows of 128 bytes), the full and empty mbarriers.
constexpr int x_stage_bytes(int np) {
  return np * kBlockK * 2;
}
constexpr int smem_bytes(int np, int stages) {
  return stages * (kTileRows * kBlockK * 2 + x_stage_bytes(np)) + 2 * stages * 8 + 1024;
}

// The CTA whose range holds item i (ranges [c I / G, (c + 1) I / G)).
__device__ __forceinline__ int owner_of(int i, int items, int grid) {
  return ((i + 1) * grid - 1) / items;
}

// A barrier of the consumer warps only (the producer runs ahead).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

// An item's place, advanced one item at a time: (tile, K block) and its ring stage and phase.
struct Cursor {
  int tile, kb, stage;
  unsigned phase;
  __device__ __forceinline__ void next(int kblocks, int stages) {
    if (++kb == kblocks) {
      kb = 0;
      ++tile;
    }
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// NP: the MMA's N (M rounded up to 8).
template <typename TW, typename TY, int NP>
__global__ void __launch_bounds__(kThreadsS, 1)
    gemv_streamk_kernel(const __grid_constant__ StreamKParams<TY> p) {
  constexpr int kBoxes = kTileRows / 64, kWStageBytes = kBoxes * kBoxBytes;
  constexpr int kXBytes = x_stage_bytes(NP), kAcc = NP / 2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ bool s_last;
  const int m = p.m, S = p.stages;
  unsigned char* smem = smem_raw + (1024 - device::smem_addr(smem_raw) % 1024) % 1024;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * (kWStageBytes + kXBytes));
  uint64_t* empty = full + S;
  const unsigned w_base = device::smem_addr(smem), x_base = w_base + S * kWStageBytes;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int grid = static_cast<int>(gridDim.x), cta = static_cast<int>(blockIdx.x);
  const int i0 = cta * p.items / grid, i1 = (cta + 1) * p.items / grid;
  const int n_items = i1 - i0;
  const Cursor start{i0 / p.kblocks, i0 % p.kblocks, 0, 0};

  if (tid == kConsumers) {
    device::prefetch_tensor_map(&p.w_map);
    device::prefetch_tensor_map(&p.x_map);
    for (int s = 0; s < S; ++s) {
      device::mbarrier_init(full + s, 2);  // the weights' arrival and x's
      device::mbarrier_init(empty + s, kConsumerWarps);
    }
    device::fence_barrier_init();
  }
  __syncthreads();  // the barriers are initialised

  if (warp == kConsumerWarps) {  // the producer
    if (lane == 0) {
      auto load_w = [&](const Cursor& at) {
        uint64_t* bar = full + at.stage;
        unsigned char* dst = smem + at.stage * kWStageBytes;
        const int row = at.tile * kTileRows;
        // Boxes wholly past N (at the last tile) are not loaded: their rows are never stored.
        const int boxes = min(kBoxes, (p.n - row + 63) / 64);
        device::mbarrier_arrive_expect_tx(bar, boxes * kBoxBytes);
        for (int b = 0; b < boxes; ++b)
          device::tma_load_2d(dst + b * kBoxBytes, &p.w_map, at.kb * kBlockK, row + 64 * b, bar);
      };
      auto load_x = [&](const Cursor& at) {
        uint64_t* bar = full + at.stage;
        device::mbarrier_arrive_expect_tx(bar, kXBytes);
        device::tma_load_2d(smem + S * kWStageBytes + at.stage * kXBytes, &p.x_map, at.kb * kBlockK,
                            0, bar);
      };
      const int first = n_items < S ? n_items : S;
      Cursor ld = start;
      for (int j = 0; j < first; ++j, ld.next(p.kblocks, S)) load_w(ld);
      pdl_wait();  // x belongs to the kernels before this one
      Cursor lx = start;
      for (int j = 0; j < first; ++j, lx.next(p.kblocks, S)) load_x(lx);
      // ld is item `first`: its stage was used one round before, released in phase ld.phase ^ 1.
      for (int j = first; j < n_items; ++j, ld.next(p.kblocks, S)) {
        device::mbarrier_wait(empty + ld.stage, ld.phase ^ 1u);
        load_w(ld);
        load_x(ld);
      }
    } else {
      pdl_wait();
    }
    pdl_launch_dependents();
    return;
  }

  // The consumers. y, the counters and the partials belong to the kernels before this one.
  pdl_wait();
  pdl_launch_dependents();
  const int wg = warp >> 2, g = lane >> 2, c = lane & 3;
  // Accumulator i: the tile's row row_of(i), token tok_of(i).
  auto row_of = [&](int i) { return wg * 64 + (warp & 3) * 16 + g + ((i >> 1) & 1) * 8; };
  auto tok_of = [&](int i) { return (i >> 2) * 8 + 2 * c + (i & 1); };
  float acc[kAcc];
  auto clear = [&] {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  };
  clear();

  // The end of tile `tile`'s items in this CTA: y, or the partial sums and the arrival.
  auto flush = [&](int tile) {
    const int row0 = tile * kTileRows, rows_left = p.n - row0;
    auto store = [&](int tok, int r, float v) {  // r: the tile's row
      if (p.bias) v += device::load_float(p.bias, row0 + r, p.bias_kind);
      p.y[tok * p.ldy + row0 + r] = device::from_float<TY>(v);
    };
    const int c_first = owner_of(tile * p.kblocks, p.items, grid);
    const int c_last = owner_of((tile + 1) * p.kblocks - 1, p.items, grid);
    if (c_first == c_last) {  // the whole tile is this CTA's
#pragma unroll
      for (int i = 0; i < kAcc; ++i)
        if (tok_of(i) < m && row_of(i) < rows_left) store(tok_of(i), row_of(i), acc[i]);
      return;
    }
    auto part = [&](int cc) {  // CTA cc's slot for this tile: its first tile or its last
      const int slot = tile == cc * p.items / grid / p.kblocks ? 0 : 1;
      return p.part + static_cast<int64_t>(cc * 2 + slot) * m * kTileRows;
    };
    float* mine = part(cta);
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      if (tok_of(i) < m) mine[tok_of(i) * kTileRows + row_of(i)] = acc[i];
    consumers_sync();  // every consumer's partials, before the release
    if (tid == 0)
      s_last =
          device::atomic_inc_acq_rel(p.counters + tile) == static_cast<unsigned>(c_last - c_first);
    consumers_sync();
    if (!s_last) return;
    // The tile's partials in CTA order, every accumulator's load of a CTA issued together (one
    // round trip to L2 per CTA, not per value).
    float sum[kAcc] = {};
    for (int cc = c_first; cc <= c_last; ++cc) {
      const float* src = part(cc);
#pragma unroll
      for (int i = 0; i < kAcc; ++i)
        if (tok_of(i) < m) sum[i] += __ldcg(src + tok_of(i) * kTileRows + row_of(i));
    }
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      if (tok_of(i) < m && row_of(i) < rows_left) store(tok_of(i), row_of(i), sum[i]);
    if (tid == 0) p.counters[tile] = 0;  // ready for the next launch (every CTA has arrived)
  };

  // Per tile of the range, its K blocks, with one batch of MMAs in flight: an item's stage is
  // released once the next item's MMAs are issued (wait<1>), the tile's last after wait<0>, which
  // comes before the accumulators are read (outside the loop that issues the MMAs, so that the
  // compiler keeps them asynchronous).
  Cursor cur = start;
  auto release = [&](int stage) {
    __syncwarp();
    if (lane == 0) device::mbarrier_arrive(empty + stage);  // this warp is done with it
  };
  for (int it = 0; it < n_items;) {
    const int tile = cur.tile, count = min(p.kblocks - cur.kb, n_items - it);
    int pending = -1;  // the stage whose MMAs may still run
    for (int j = 0; j < count; ++j, cur.next(p.kblocks, S)) {
      device::mbarrier_wait(full + cur.stage, cur.phase);
      const unsigned wa = w_base + cur.stage * kWStageBytes + wg * kBoxBytes;
      const unsigned xa = x_base + cur.stage * kXBytes;
      device::wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBlockK / 16; ++ks) {  // k16 steps: 32 bytes along the 128-byte rows
        device::wgmma::mma<TW, NP>(acc, device::wgmma::desc_sw128(wa + ks * 32),
                                   device::wgmma::desc_sw128(xa + ks * 32));
      }
      device::wgmma::commit();
      device::wgmma::wait<1>();  // the previous item's MMAs are done
      if (pending >= 0) release(pending);
      pending = cur.stage;
    }
    device::wgmma::wait<0>();
    device::wgmma::hold(acc);
    release(pending);
    it += count;
    flush(tile);
    clear();
  }
}

template <typename TW, typename TY, int NP>
void launch_np(const StreamKParams<TY>& p, unsigned grid, cudaStream_t stream) {
  allow_dynamic_smem<&gemv_streamk_kernel<TW, TY, NP>>(kSmemBudget);
  const auto smem = static_cast<size_t>(smem_bytes(NP, p.stages));
  // DSPARK_CUDA_GEMV_STREAMK_PDL=0 (read once; a measurement knob): a plain launch, which starts
  // after the kernel before it ends (its pdl_wait() is then a no-op).
  static const bool pdl = env_switch("DSPARK_CUDA_GEMV_STREAMK_PDL", true);
  if (pdl) {
    launch_pdl(gemv_streamk_kernel<TW, TY, NP>, dim3(grid), dim3(kThreadsS), smem, stream, p);
  } else {
    gemv_streamk_kernel<TW, TY, NP><<<grid, kThreadsS, smem, stream>>>(p);
    DSPARK_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename TW, typename TY>
void launch(const StreamKParams<TY>& p, int np, unsigned grid, cudaStream_t stream) {
  switch (np / 8) {
    case 1:
      return launch_np<TW, TY, 8>(p, grid, stream);
    case 2:
      return launch_np<TW, TY, 16>(p, grid, stream);
    case 3:
      return launch_np<TW, TY, 24>(p, grid, stream);
    case 4:
      return launch_np<TW, TY, 32>(p, grid, stream);
    case 5:
      return launch_np<TW, TY, 40>(p, grid, stream);
    default:
      return launch_np<TW, TY, 48>(p, grid, stream);
  }
}

// On unless the environment has DSPARK_CUDA_GEMV_STREAMK=0 (read once) or after
// set_streamk_linear(false).
std::atomic<int>& streamk_flag() {
  static std::atomic<int> flag = env_switch("DSPARK_CUDA_GEMV_STREAMK", false) ? 1 : 0;
  return flag;
}

// The kernel's launches in this process (streamk_linear_launches).
std::atomic<uint64_t>& launch_count() {
  static std::atomic<uint64_t> n{0};
  return n;
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

// A [rows][cols] 16-bit matrix (row stride `ld` elements) as a 2-D tensor map of boxes of 64
// columns x box_rows rows with the 128-byte swizzle (elements outside the matrix read as zeros);
// false if the driver declines.
bool encode_map(CUtensorMap& map, const void* base, DType dtype, int64_t rows, int64_t cols,
                int64_t ld, int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {kBlockK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(&map,
                dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                2, const_cast<void*>(base), dims, strides, box, element_strides,
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

// wgmma runs on sm_90a machine code only: compute capability 9.0.
bool streamk_linear_available() {
  return compute_major() == 9 && tensor_map_encoder() != nullptr;
}

uint64_t streamk_linear_launches() {
  return launch_count().load();
}

bool try_gemv_streamk(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Tensor& y) {
  if (!streamk_linear_enabled() || !gemv_tile::fits_16bit(x, w, y)) return false;
  const gemv_tile::LinearDims d = gemv_tile::linear_dims(x, w, y);
  if (d.m < 1 || d.m > kGemvStreamKMaxRows || d.n > kGemvMaxN || !streamk_linear_available())
    return false;
  // Only linears of N outputs or fewer (DSPARK_CUDA_GEMV_STREAMK_MAX_N=N, read once; a measurement
  // knob): the others go to cuBLASLt.
  static const int64_t max_n = [] {
    const char* s = std::getenv("DSPARK_CUDA_GEMV_STREAMK_MAX_N");
    return s && std::atoll(s) > 0 ? std::atoll(s) : int64_t{kGemvMaxN};
  }();
  if (d.n > max_n) return false;
  const int sms = sm_count();
  const int64_t tiles = ceil_div(d.n, int64_t{kTileRows}), kblocks = ceil_div(d.k, kBlockK);
  const int64_t items = tiles * kblocks;
  if (items * sms >= (int64_t{1} << 31)) return false;  // the kernel's item arithmetic is 32-bit
  const int m = static_cast<int>(d.m), np = static_cast<int>(ceil_div(d.m, 8)) * 8;
  CUtensorMap w_map{}, x_map{};
  if (!encode_map(w_map, w.data(), x.dtype(), d.n, d.k, d.k, 64) ||
      !encode_map(x_map, x.data(), x.dtype(), d.m, d.k, d.ldx, np))
    return false;
  const size_t part_floats = static_cast<size_t>(sms) * 2 * kGemvStreamKMaxRows * kTileRows;
  unsigned* buf = arrival_counters(ctx, ArrivalPool::linear_streamk, kMaxTilesS + part_floats);
  if (buf == nullptr) return false;  // first use inside a graph capture: cuBLASLt this time
  // Pipeline stages (DSPARK_CUDA_GEMV_STREAMK_STAGES, 2..12, read once; a measurement knob), fewer
  // when the shared memory would not fit.
  static const int requested = [] {
    const char* s = std::getenv("DSPARK_CUDA_GEMV_STREAMK_STAGES");
    const int v = s ? std::atoi(s) : 0;
    return v > 0 ? std::clamp(v, 2, kMaxStagesS) : kDefaultStagesS;
  }();
  int stages = requested;
  while (stages > 2 && static_cast<size_t>(smem_bytes(np, stages)) > kSmemBudget) --stages;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(sms, items));
  const gemv_tile::BiasArg b = gemv_tile::bias_arg(bias);
  const cudaStream_t stream = stream_of(ctx);
  gemv_tile::dispatch_16bit(x.dtype(), y.dtype(),
                            [&]<typename TW, typename TY>(TypeTag<TW>, TypeTag<TY>) {
                              using DW = device_t<TW>;
                              using DY = device_t<TY>;
                              const StreamKParams<DY> p{w_map,
                                                        x_map,
                                                        device_ptr<TY>(y),
                                                        b.data,
                                                        b.kind,
                                                        d.ldy,
                                                        m,
                                                        static_cast<int>(d.n),
                                                        static_cast<int>(kblocks),
                                                        static_cast<int>(items),
                                                        stages,
                                                        buf,
                                                        reinterpret_cast<float*>(buf + kMaxTilesS)};
                              launch<DW, DY>(p, np, grid, stream);
                            });
  launch_count().fetch_add(1);
  return true;
}

}  // namespace dspark::cuda
