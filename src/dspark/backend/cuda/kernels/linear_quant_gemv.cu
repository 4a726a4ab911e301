// linear with block-quantized weights for 1..kQuantGemvMaxRows rows of x (decode, draft steps), and
// for any number of rows in chunks of kQuantGemvMaxRows (batch-invariant numerics, `--exact`):
// y[M, N] = x[M, K] . dequantize(w)^T (+ bias), in integers as the CPU's quant_gemm does it
// (backend/cpu/kernels/quant_gemm.h): x rounded per block of 32 values to int8 with one f32 scale,
// each weight word of 4 values multiplied with 4 of x by one dp4a, the integer sums scaled per
// sub-block in f32. The x blocks are the CPU's bit for bit; only the order of the f32 sums differs.
//
//  - Work: a CTA of kQuantGemvWarps warps takes tiles of 16 / warps_k weight rows (grid-stride
//    over the tiles); warps_k warps share a row, each a contiguous range of its super-blocks.
//  - Weights: each warp streams its row's range a stage (kQuantGemvStageSbs super-blocks) at a
//    time through its own ring of quant_gemv_stages slots in shared memory, the 16-byte chunks
//    that hold the stage (rows of Q6_K or Q8_0 need not be 16-byte aligned), three stages (Q6_K,
//    Q8_0: two) ahead of its math and across tiles. The first stages are requested before
//    pdl_wait(). On sm_90 one lane requests a stage as one bulk copy that completes on the slot's
//    mbarrier (the math is issue-bound: per-lane cp.async of every 16 bytes cost a third of the
//    instructions); elsewhere the lanes request its chunks by cp.async.
//  - x: after pdl_wait() the CTA rounds all M rows into shared memory (quant_dp4a.cuh's
//    quantize_x): int8 values (in the order the lanes read them, XView), per block of 32 the scale
//    d and s = d * sum(q), per 16 values the integer sum of q (the offset of Q4_0, Q5_0, Q6_K:
//    sum((q_w - off) q_x) = sum(q_w q_x) - off sum(q_x)).
//  - Math: lane (b, u) of a warp takes super-block b of the stage and its unit u of 64 values
//    (quant_blocks.cuh's QuantMma view): 16 words, 16 dp4a per row of x, the unit's 2 (Q6_K: 4)
//    sub-block scales decoded once. Per sub-block the lane adds D * d_x * sum, and the offset and
//    min terms.
//  - Sums: per warp, lanes in registers over the warp's super-blocks in order, then a butterfly;
//    the warps_k partial sums of a row added in warp order. The plan (warps_k) depends on N, K and
//    the SM count only, so a row's bits do not depend on M or on the grid.
//  - SwiGLU (linear_blocks_gemv_swiglu): w holds gate rows then as many up rows; a tile's first
//    half of weight rows are gate rows and its second half the up rows of the same outputs, and
//    its end rounds both sums to y's dtype and stores swiglu of them (device/swiglu.cuh) as the
//    swiglu op would: the same bits as the product then the op, without the product's store,
//    the op's launch and its reads.
//  - Pairs (linear_blocks_gemv_pair): two weights of different types over one x in one launch;
//    the first CTAs run the first weight's tiles as a launch of their own would, the others the
//    second's (each part its own plan and x layout, so its own bits), the split from
//    gemv_pair_split.
//  - Chunks: above kQuantGemvMaxRows rows, blockIdx.y is a chunk of that many rows (the last may
//    hold fewer: the x region's other rows are left as they are and never stored). The grid's x
//    is cut so that every chunk's CTAs are resident at once: CTAs of one tile and different chunks
//    stream the same weights at about the same time, which then mostly come from L2.
#include <algorithm>
#include <mutex>

#include "dspark/backend/cuda/device/bulk_copy.cuh"
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/swiglu.cuh"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/linear_quant_gemv.h"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/kernels/quant_blocks.cuh"
#include "dspark/backend/cuda/kernels/quant_dp4a.cuh"
#include "dspark/backend/cuda/policy/linear_quant.h"

namespace dspark::cuda {
namespace {

using quant::QuantMma;
using quant::XView;
// The few-row kernel's loop over a unit keeps quant_dp4a.cuh's unit_accumulate inline in its own
// body: called as a function it costs this kernel registers at one row of x (spills under the
// 64-register bound of two CTAs per SM) and ~2% of a Q4_K_M decode step.
using quant::dp4a_offset;
using quant::kHighNibbles;
using quant::kquant_scales_mins;
using quant::quantize_x;
using quant::sub_scales;
using quant::unit_dots;
using quant::unit_words;
constexpr int kWarps = kQuantGemvWarps;
constexpr int kThreads = kWarps * 32;

struct GemvParams {
  const uint8_t* w;  // [n][row_bytes]
  int64_t row_bytes;
  int64_t w_bytes;
  const void* x;  // [m][k], rows ldx apart
  device::FloatKind x_kind;
  int64_t ldx;
  void* y;  // [m][n], rows ldy apart
  device::FloatKind y_kind;
  int64_t ldy;
  const void* bias;  // [n] or null
  device::FloatKind bias_kind;
  int m, n, k, ksb;
  int warps_k, tiles;
  int swiglu_inter;  // 0, or SwiGLU's outputs: n = 2 * swiglu_inter weight rows (gate, then up)
  QuantGemvLayout layout;
};

// The rows of x of a CTA's chunk as quantize_x reads them (values: a reference to the kernel's
// parameters would copy them to local memory).
struct ChunkX {
  const void* x;  // the chunk's first row
  int64_t ldx;
  device::FloatKind x_kind;
  int m, k;
  struct {
    int x_row_bytes, x_q_bytes;
  } layout;
};

// The product as CTA `bx` of `gx` CTAs that share p's tiles (a launch's blockIdx.x and gridDim.x,
// or a share of a pair launch's). kSwiglu: p.swiglu_inter outputs of SwiGLU (a separate
// instantiation: the branches cost the plain product registers).
template <QuantType Q, int M, bool kSwiglu>
__device__ __forceinline__ void gemv_cta(const GemvParams& p, const int bx, const int gx,
                                         uint8_t* const smem) {
  using F = QuantMma<Q>;
  constexpr int SBB = F::kSbBytes;
  constexpr int S = kQuantGemvStageSbs;
  constexpr int kStages = quant_gemv_stages(Q);
  constexpr int kOff = dp4a_offset<Q>();

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int wk = warp % p.warps_k, wr = warp / p.warps_k, rows_per_tile = kWarps / p.warps_k;
  const int per_warp = (p.ksb + p.warps_k - 1) / p.warps_k;
  const int my0 = min(wk * per_warp, p.ksb), my1 = min(my0 + per_warp, p.ksb);
  const int chunks = (my1 - my0 + S - 1) / S;  // stages per tile
  const int my_tiles = (p.tiles - bx + gx - 1) / gx;
  const int total = my_tiles * chunks;
  const int slot_bytes = p.layout.slot;
  uint8_t* const ring = smem + static_cast<size_t>(warp) * kStages * slot_bytes;
  float* const part = reinterpret_cast<float*>(smem + p.layout.part);
  uint8_t* const xregion = smem + p.layout.x;

  // The weight bytes of stage i of this warp: tile i / chunks (its row of this warp, clamped to
  // the last), super-blocks my0 + (i % chunks) S .. + nsb - 1; chunk j and tile t are tracked
  // incrementally for the stage being issued (it_*) and the one being computed.
  [[maybe_unused]] const int half = rows_per_tile / 2;  // SwiGLU: outputs per tile
  auto row_at = [&](int tile) {
    if constexpr (kSwiglu) {
      const int out = min(tile * half + wr % half, p.swiglu_inter - 1);
      return static_cast<int64_t>(wr < half ? out : p.swiglu_inter + out);
    } else {
      return static_cast<int64_t>(min(tile * rows_per_tile + wr, p.n - 1));
    }
  };
  int it_tile = bx, it_chunk = 0, issued = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The warp's kStages slot barriers (one arrival: the issuing lane's, plus the copy's bytes).
  const unsigned bars = static_cast<unsigned>(__cvta_generic_to_shared(smem + p.layout.bars)) +
                        static_cast<unsigned>(warp * kStages * 8);
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(ring));
  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) device::mbar_init(bars + 8 * s, 1);
    device::mbar_init_fence();
  }
  __syncwarp();
  // The stage's bytes [a0, e1) as one bulk copy; e1 stops at the matrix's last 16-byte multiple,
  // and the few bytes of the last super-block past it (Q6_K, Q8_0 rows) are copied by the lane.
  auto issue_next = [&]() {
    if (issued < total) {
      if (lane == 0) {
        const int sb0 = my0 + it_chunk * S, nsb = min(S, my1 - sb0);
        const int64_t a = row_at(it_tile) * p.row_bytes + int64_t{sb0} * SBB;
        const int64_t a0 = a & ~int64_t{15}, end = a + int64_t{nsb} * SBB;
        const int64_t e1 = min((end + 15) & ~int64_t{15}, p.w_bytes & ~int64_t{15});
        const int s = issued % kStages;
        device::fence_proxy_async_shared();  // the slot's last reads before its refill
        device::mbar_arrive_expect_tx(bars + 8 * s, static_cast<unsigned>(e1 - a0));
        device::bulk_copy_g2s(ring_s + s * slot_bytes, p.w + a0, static_cast<unsigned>(e1 - a0),
                              bars + 8 * s);
        uint8_t* slot = ring + s * slot_bytes;
        for (int64_t b = e1; b < end; ++b) slot[b - a0] = p.w[b];
      }
      if (++it_chunk == chunks) it_chunk = 0, it_tile += gx;
      ++issued;
    }
  };
  auto wait_stage = [&](int i) { device::mbar_wait(bars + 8 * (i % kStages), (i / kStages) & 1); };
#else
  auto issue_next = [&]() {
    if (issued < total) {
      const int sb0 = my0 + it_chunk * S, nsb = min(S, my1 - sb0);
      const int64_t a = row_at(it_tile) * p.row_bytes + int64_t{sb0} * SBB;
      const int64_t a0 = a & ~int64_t{15};
      const int nvec = static_cast<int>((a + int64_t{nsb} * SBB - a0 + 15) >> 4);
      device::cp_async16_stream_chunks(ring + (issued % kStages) * slot_bytes, p.w, p.w_bytes, a0,
                                       nvec, lane, 32);
      if (++it_chunk == chunks) it_chunk = 0, it_tile += gx;
      ++issued;
    }
    device::cp_async_commit();  // an empty group past the end keeps the count
  };
  auto wait_stage = [&](int) { device::cp_async_wait<kStages - 1>(); };
#endif

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue_next();  // weights: before the wait
  pdl_wait();
  pdl_launch_dependents();
  // The chunk's first row of x and y, and its rows, recomputed where used (registers). Chunks are
  // of kQuantGemvMaxRows rows: fewer rows are a call's only chunk.
  constexpr bool kChunks = M == kQuantGemvMaxRows;
  auto chunk_row0 = [&]() { return kChunks ? static_cast<int>(blockIdx.y) * M : 0; };
  auto chunk_rows = [&]() { return kChunks ? min(M, p.m - chunk_row0()) : M; };
  if constexpr (kChunks) {
    const int64_t x_size = p.x_kind == device::FloatKind::f32 ? 4 : 2;
    const ChunkX cx{static_cast<const uint8_t*>(p.x) + chunk_row0() * p.ldx * x_size,
                    p.ldx,
                    p.x_kind,
                    chunk_rows(),
                    p.k,
                    {p.layout.x_row_bytes, p.layout.x_q_bytes}};
    quantize_x<Q, kThreads>(cx, xregion, static_cast<int>(threadIdx.x));
  } else {
    quantize_x<Q, kThreads>(p, xregion, static_cast<int>(threadIdx.x));
  }
  __syncthreads();

  const XView xv{xregion, p.layout.x_row_bytes, p.layout.x_q_bytes, p.k / 32};
  const int sbl = lane >> 2, u = lane & 3;
  constexpr int kSubs = F::kStepsPerSub == 2 ? 2 : 4;  // sub-blocks of a unit
  int i = 0;
  for (int t = 0; t < my_tiles; ++t) {
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.0f;
    const int64_t row_base = row_at(bx + t * gx) * p.row_bytes;
    for (int j = 0; j < chunks; ++j, ++i) {
      issue_next();
      wait_stage(i);
      __syncwarp();
      const int sb0 = my0 + j * S, nsb = min(S, my1 - sb0);
      // Where the stage starts in its slot (rows and stages of 16-byte multiples start at 0).
      int lead = 0;
      if constexpr (SBB % 16 != 0) lead = static_cast<int>((row_base + int64_t{sb0} * SBB) & 15);
      const uint8_t* slot = ring + (i % kStages) * slot_bytes + lead;
      if (sbl < nsb) {
        const uint8_t* sb = slot + sbl * SBB;
        const int sbg = sb0 + sbl;  // the super-block's index in the row
        uint32_t q[16];
        unit_words<Q>(sb, u, q);
        if constexpr (Q == QuantType::q4_k || Q == QuantType::q5_k) {
          // Per sub-block: D * dx * sum(q_w q_x) - Mn * dx * sum(q_x), with the 6-bit scale and
          // min multiplied in integers (exact) and d, dmin applied in f32.
          int sc[2], mq[2];
          kquant_scales_mins(sb, u, sc, mq);
          const float d = quant::half_at(sb), dmin = quant::half_at(sb + 2);
          const int e = sbg * 256 + 64 * u;  // the unit's first value: its two blocks of x
#pragma unroll
          for (int r = 0; r < M; ++r) {
            const uint8_t* xq = xv.q(r);
            int dots[4];
            unit_dots<Q>(q, xq, sbg, u, dots);
            const int4 s16 = *reinterpret_cast<const int4*>(xv.sum16(r) + (e >> 4));
            const float2 dx = *reinterpret_cast<const float2*>(xv.d(r) + (e >> 5));
            int dot[2] = {dots[0] + dots[1], dots[2] + dots[3]};
            if constexpr (kHighNibbles<Q>) dot[1] >>= 4;  // exact: a multiple of 16
            const int xsum[2] = {s16.x + s16.y, s16.z + s16.w};
            const float dxs[2] = {dx.x, dx.y};
#pragma unroll
            for (int k2 = 0; k2 < 2; ++k2) {
              const float t2 = fmaf(d, static_cast<float>(sc[k2] * dot[k2]),
                                    -dmin * static_cast<float>(mq[k2] * xsum[k2]));
              acc[r] = fmaf(dxs[k2], t2, acc[r]);
            }
          }
        } else {
          float d[kSubs], mn[kSubs];
#pragma unroll
          for (int k2 = 0; k2 < kSubs; ++k2)
            sub_scales<Q>(sb, F::sub(u, k2 * F::kStepsPerSub), d[k2], mn[k2]);
#pragma unroll
          for (int r = 0; r < M; ++r) {
            const uint8_t* xq = xv.q(r);
            int dots[4];
            unit_dots<Q>(q, xq, sbg, u, dots);
#pragma unroll
            for (int k2 = 0; k2 < kSubs; ++k2) {
              const int e = sbg * 256 + F::elem(u, k2 * F::kStepsPerSub);  // its first value
              const int blk = e >> 5;
              int dt = F::kStepsPerSub == 2 ? dots[2 * k2] + dots[2 * k2 + 1] : dots[k2];
              if constexpr (kOff != 0) {
                const int* s16 = xv.sum16(r) + (e >> 4);
                dt -= kOff * (F::kStepsPerSub == 2 ? s16[0] + s16[1] : s16[0]);
              }
              acc[r] = fmaf(__fmul_rn(d[k2], xv.d(r)[blk]), static_cast<float>(dt), acc[r]);
              if constexpr (F::kMin) acc[r] = fmaf(mn[k2], xv.s(r)[blk], acc[r]);
            }
          }
        }
      }
      __syncwarp();  // the slot is refilled by a later issue
    }
    // The tile's sums: a butterfly per warp, then the warps_k partial sums of a row in order.
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    }
    const int tile = bx + t * gx;
    const int64_t row = int64_t{tile} * rows_per_tile + wr;
    if constexpr (kSwiglu) {
      // Each output's gate and up sums (rows rr and rr + half of the tile), added over their
      // warps_k warps as below, rounded to y's dtype as the product would store them.
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < M; ++r) part[warp * M + r] = acc[r];
      }
      __syncthreads();
      if (static_cast<int>(threadIdx.x) < half * M) {
        const int rr = static_cast<int>(threadIdx.x) / M, tok = static_cast<int>(threadIdx.x) % M;
        const int64_t out = int64_t{tile} * half + rr;
        if (out < p.swiglu_inter && tok < chunk_rows()) {
          float g = 0.0f, u = 0.0f;
          for (int k2 = 0; k2 < p.warps_k; ++k2) {
            g += part[(rr * p.warps_k + k2) * M + tok];
            u += part[((rr + half) * p.warps_k + k2) * M + tok];
          }
          const float v =
              device::swiglu_value(device::round_to(g, p.y_kind), device::round_to(u, p.y_kind));
          device::store_float(p.y, (chunk_row0() + tok) * p.ldy + out, p.y_kind, v);
        }
      }
      __syncthreads();  // part is written again by the next tile
      continue;
    }
    if (p.warps_k == 1) {
      if (lane < chunk_rows() && row < p.n) {
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < M; ++r) s = lane == r ? acc[r] : s;
        if (p.bias != nullptr) s += device::load_float(p.bias, row, p.bias_kind);
        device::store_float(p.y, (chunk_row0() + lane) * p.ldy + row, p.y_kind, s);
      }
      continue;
    }
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < M; ++r) part[warp * M + r] = acc[r];
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < rows_per_tile * M) {
      const int rr = static_cast<int>(threadIdx.x) / M, tok = static_cast<int>(threadIdx.x) % M;
      const int64_t n_idx = int64_t{tile} * rows_per_tile + rr;
      if (n_idx < p.n && tok < chunk_rows()) {
        float s = 0.0f;
        for (int k2 = 0; k2 < p.warps_k; ++k2) s += part[(rr * p.warps_k + k2) * M + tok];
        if (p.bias != nullptr) s += device::load_float(p.bias, n_idx, p.bias_kind);
        device::store_float(p.y, (chunk_row0() + tok) * p.ldy + n_idx, p.y_kind, s);
      }
    }
    __syncthreads();  // part is written again by the next tile
  }
}

// The kernel's CTAs resident per SM at `smem` bytes of dynamic shared memory (at least 1; queried
// once per size), after allowing it the device's most.
template <auto kernel>
int resident_ctas(const DeviceCaps& caps, size_t smem) {
  allow_dynamic_smem<kernel>(quant_mma_smem_limit(caps));
  static std::mutex mu;
  static size_t cached_smem = 0;
  static int cached_ctas = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (cached_smem != smem) {
    DSPARK_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached_ctas, kernel, kThreads, smem));
    cached_smem = smem;
  }
  return std::max(cached_ctas, 1);
}

// Two CTAs per SM for one or two rows of x (64 registers), one for more.
template <QuantType Q, int M, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, M <= 2 ? 2 : 1)
    linear_quant_gemv_kernel(const GemvParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  gemv_cta<Q, M, kSwiglu>(p, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), smem);
}

template <QuantType Q, int M, bool kSwiglu>
void launch_gemv(const GemvParams& p, const DeviceCaps& caps, cudaStream_t stream) {
  constexpr auto kernel = &linear_quant_gemv_kernel<Q, M, kSwiglu>;
  const int ctas = resident_ctas<kernel>(caps, p.layout.bytes);
  const int chunks = (p.m + M - 1) / M;  // blockIdx.y: chunks of M rows (only M = 4 has several)
  const int grid = std::min(p.tiles, std::max(ctas * std::max(caps.sm_count, 1) / chunks, 1));
  launch_pdl(kernel, dim3(static_cast<unsigned>(grid), static_cast<unsigned>(chunks)),
             dim3(kThreads), p.layout.bytes, stream, p);
}

// Two products of one x, a of type QA and b of QB, in one launch: CTAs [0, grid_a) take a's tiles
// and the others b's, each share as its own launch of gemv_cta would (one chunk of rows).
struct GemvPairParams {
  GemvParams a, b;
  int grid_a;
};

template <QuantType QA, QuantType QB, int M>
__global__ void __launch_bounds__(kThreads, M <= 2 ? 2 : 1)
    linear_quant_gemv_pair_kernel(const GemvPairParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int bx = static_cast<int>(blockIdx.x), gx = static_cast<int>(gridDim.x);
  if (bx < p.grid_a) {
    gemv_cta<QA, M, false>(p.a, bx, p.grid_a, smem);
  } else {
    gemv_cta<QB, M, false>(p.b, bx - p.grid_a, gx - p.grid_a, smem);
  }
}

template <QuantType QA, QuantType QB, int M>
void launch_gemv_pair(GemvPairParams p, const DeviceCaps& caps, cudaStream_t stream) {
  constexpr auto kernel = &linear_quant_gemv_pair_kernel<QA, QB, M>;
  const size_t smem = std::max(p.a.layout.bytes, p.b.layout.bytes);
  const int ctas = resident_ctas<kernel>(caps, smem);
  const QuantGemvPairSplit split = gemv_pair_split(
      p.a.tiles, int64_t{kWarps / p.a.warps_k} * p.a.row_bytes, p.b.tiles,
      int64_t{kWarps / p.b.warps_k} * p.b.row_bytes, int64_t{ctas} * std::max(caps.sm_count, 1));
  p.grid_a = split.grid_a;
  launch_pdl(kernel, dim3(static_cast<unsigned>(split.grid_a + split.grid_b)), dim3(kThreads), smem,
             stream, p);
}

// f.template operator()<M>() for the instantiation of M = min(m, kQuantGemvMaxRows) rows.
template <typename F>
void with_rows(int m, F&& f) {
  static_assert(kQuantGemvMaxRows == 4, "with_rows covers 4 rows");
  switch (std::min(m, kQuantGemvMaxRows)) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    default:
      return f.template operator()<4>();
  }
}

// The pair launch with a of type A and b of B, p's parts swapped where a is the B one.
template <QuantType A, QuantType B>
bool launch_pair_as(const GemvPairParams& p, QuantType qa, const DeviceCaps& caps,
                    cudaStream_t stream) {
  const GemvPairParams q = qa == A ? p : GemvPairParams{p.b, p.a, 0};
  with_rows(q.a.m, [&]<int M>() { launch_gemv_pair<A, B, M>(q, caps, stream); });
  return true;
}

// The type pairs a pair launch is built for: the q/k and v parts of llama.cpp's K-quant mixes
// (Q4_K_M and Q5_K_M keep v in Q6_K in some layers, Q4_K_S in Q5_K), in either order; false for
// any other pair.
bool launch_pair(const GemvPairParams& p, QuantType qa, QuantType qb, const DeviceCaps& caps,
                 cudaStream_t stream) {
  using enum QuantType;
  const auto is = [&](QuantType x, QuantType y) {
    return (qa == x && qb == y) || (qa == y && qb == x);
  };
  if (is(q4_k, q6_k)) return launch_pair_as<q4_k, q6_k>(p, qa, caps, stream);
  if (is(q5_k, q6_k)) return launch_pair_as<q5_k, q6_k>(p, qa, caps, stream);
  if (is(q4_k, q5_k)) return launch_pair_as<q4_k, q5_k>(p, qa, caps, stream);
  return false;
}

}  // namespace

namespace {

// The kernel's parameters for y = x . dequantize(w)^T (+ bias) over w's n rows; y's row stride for
// one row is `y_cols` (n, or SwiGLU's n / 2).
GemvParams gemv_params(const Tensor& x, const WeightMatrix& w, const Tensor& bias, const Tensor& y,
                       int64_t y_cols, const QuantGemvPlan& plan) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows;
  GemvParams p{};
  p.w = static_cast<const uint8_t*>(w.data.data());
  p.row_bytes = w.data.size(1);
  p.w_bytes = w.n * p.row_bytes;
  p.x = x.data();
  p.x_kind = float_kind(x.dtype());
  p.ldx = m == 1 ? w.k : xv.stride;
  p.y = y.data();
  p.y_kind = float_kind(y.dtype());
  p.ldy = m == 1 ? y_cols : yv.stride;
  const bool has_bias = bias.defined() && bias.numel() > 0;
  p.bias = has_bias ? bias.data() : nullptr;
  p.bias_kind = has_bias ? float_kind(bias.dtype()) : device::FloatKind::f32;
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(w.n);
  p.k = static_cast<int>(w.k);
  p.ksb = static_cast<int>(w.k / 256);
  p.warps_k = plan.warps_k;
  p.tiles = plan.tiles;
  p.layout = quant_gemv_layout(w.quant, std::min<int64_t>(m, kQuantGemvMaxRows), w.k);
  DSPARK_CHECK_KIND(internal, p.layout.bytes == plan.smem_bytes,
                    "linear_blocks: the gemv plan's shared memory {} != the layout's {}",
                    plan.smem_bytes, p.layout.bytes);
  return p;
}

void launch(Context& ctx, const GemvParams& p, QuantType quant) {
  const DeviceCaps& caps = ctx.cuda_caps();
  const cudaStream_t stream = stream_of(ctx);
  quant::dispatch_quant(quant, [&]<QuantType Q>(quant::QuantTag<Q>) {
    with_rows(p.m, [&]<int M>() {
      if (p.swiglu_inter != 0) {
        launch_gemv<Q, M, true>(p, caps, stream);
      } else {
        launch_gemv<Q, M, false>(p, caps, stream);
      }
    });
  });
}

}  // namespace

void linear_blocks_gemv(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                        const Tensor& y, const QuantGemvPlan& plan) {
  launch(ctx, gemv_params(x, w, bias, y, w.n, plan), w.quant);
}

bool linear_blocks_gemv_pair(Context& ctx, const Tensor& x, const GemvPart& a, const GemvPart& b) {
  const int64_t m = row_view(x).rows;
  if (m < 1 || m > kQuantGemvMaxRows || a.w->quant == b.w->quant) return false;
  const GemvPairParams p{gemv_params(x, *a.w, a.bias, a.y, a.w->n, a.plan),
                         gemv_params(x, *b.w, b.bias, b.y, b.w->n, b.plan), 0};
  return launch_pair(p, a.w->quant, b.w->quant, ctx.cuda_caps(), stream_of(ctx));
}

bool gemv_swiglu_fits(const WeightMatrix& w, const QuantGemvPlan& plan) {
  return w.n % 2 == 0 && kQuantGemvWarps / plan.warps_k >= 2;
}

void linear_blocks_gemv_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w,
                               const Tensor& out, const QuantGemvPlan& plan) {
  DSPARK_CHECK_KIND(internal, gemv_swiglu_fits(w, plan),
                    "linear_blocks_gemv_swiglu: {} weight rows at {} warps per row", w.n,
                    plan.warps_k);
  GemvParams p = gemv_params(x, w, Tensor{}, out, w.n / 2, plan);
  p.swiglu_inter = static_cast<int>(w.n / 2);
  const int half = kQuantGemvWarps / plan.warps_k / 2;
  p.tiles = static_cast<int>((p.swiglu_inter + half - 1) / half);
  launch(ctx, p, w.quant);
}

}  // namespace dspark::cuda
