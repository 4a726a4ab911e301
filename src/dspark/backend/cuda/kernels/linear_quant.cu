// linear with block-quantized weights (contract: ops/matmul.h): y[M, N] = x[M, K] .
// dequantize(w)^T (+ bias), the kernel chosen by choose_linear_blocks (policy/linear_quant.h).
//
// 1..kQuantGemvMaxRows rows of x (decode, draft steps): the dp4a kernel of linear_quant_gemv.cu.
//
// The tensor-core kernel (up to 48 rows of bf16 / f16 x: verify, batched decode) reads every
// weight byte once per call:
//  - Work: K is cut into slices of whole super-blocks (256 values), the weight rows into tiles of
//    16; a CTA takes one slice of a group of consecutive tiles (a grid of slices x row groups, at
//    most one CTA per multiprocessor: the policy's plan). Its 16 warps are warps_k x warps_r:
//    warps_k split the slice's super-blocks, warps_r tiles are in flight at once (a round).
//  - Weights: each warp streams its 16-row tiles of its super-blocks, a stage (16 rows x 1
//    super-block, 2.3-4.4 KB) at a time, through its own ring of 2 stages in shared memory by
//    cp.async (16-byte copies of the 16-byte chunks that hold the stage's bytes: a fixed count at
//    fixed offsets where a super-block is whole chunks, every format but Q6_K, whose rows need
//    not be 16-byte aligned), one stage ahead of its math and across tiles and
//    rounds: 16 warps with short rings hide more latency than 8 with long ones. The first stage is
//    requested before pdl_wait() (weights are never written by a forward). A warp's stage is its
//    own: __syncwarp, no CTA barrier, between the copies and the reads.
//  - x: after pdl_wait() the CTA copies its slice of x (all M rows, 16-bit) into shared memory.
//  - Math: per stage, the warp first writes the stage's per-sub-block scales D (and Mn), rounded
//    to x's type, into a table (two lanes per row and super-block, half its sub-blocks each),
//    then walks its super-blocks in MMA steps of 16 values (quant_blocks.cuh): lane (g, c) turns
//    the 4 consecutive values 4c..4c+3 of rows g and g + 8 into exact integers q - offset of x's
//    type, then into weights D * (q - offset) + Mn by one packed FMA per pair (the m16n8k16 A
//    fragment, logical k 2c, 2c+1, 2c+8, 2c+9 = physical 4c..4c+3), and loads the same 4 values
//    of x rows g + 8t (the B fragment) with one 8-byte shared load. The MMAs add into f32
//    accumulators over the warp's whole range: no per-sub-block work per row of x. The weights are
//    rounded to x's type as on the dequantizing path (docs/cuda-kernels.md's tolerances).
//  - Sums: at the end of a round the warps' accumulators meet in shared memory and each (row,
//    row of x) is added over warps_k in warp order. With one slice that is y (+ bias); with
//    several, the CTA writes its slice's f32 sums to scratch and the last CTA of the row group
//    to finish (an arrival counter, arrival_counters.h) adds the slices in slice order, adds the
//    bias and writes y. The order depends on the shape and the SM count only: the same bits on
//    every call (not the same bits for different M: another plan).
//
// Everything else (more rows: prefill; f32 x; K not a multiple of 256; unaligned operands): the
// weight rows are dequantized into ctx.scratch() as x's dtype (quant_rows.cu), at most 64 MB of
// rows at a time, and each chunk goes through the dense linear (cuBLASLt, or the one-row kernel).
#include <algorithm>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/arrival_counters.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/linear_quant_gemv.h"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/kernels/quant_blocks.cuh"
#include "dspark/backend/cuda/kernels/quant_rows.h"
#include "dspark/backend/cuda/policy/linear_quant.h"

namespace dspark::cuda {
namespace {

using quant::QuantMma;
constexpr int kThreads = kQuantMmaWarps * 32;
constexpr int kStages = kQuantMmaStages;
// The prefill path's scratch: weight rows dequantized per chunk.
constexpr size_t kDequantChunkBytes = size_t{64} << 20;

template <typename TX>
struct QmmaParams {
  const uint8_t* w;   // [n][row_bytes]
  int64_t row_bytes;  // ksb super-blocks
  int64_t w_bytes;    // n * row_bytes: copies past it read zeros
  const TX* x;        // [m][k], rows ldx apart
  int64_t ldx;
  void* y;  // [m][n], rows ldy apart
  device::FloatKind y_kind;
  int64_t ldy;
  const void* bias;  // [n] or null
  device::FloatKind bias_kind;
  float* part;         // [slices][m][n] when slices > 1
  unsigned* counters;  // [row_groups] when slices > 1
  int m, n, ksb;
  int slices, slice_sbs, warps_k, warps_r, tiles_per_cta;
  // Shared memory (policy/linear_quant.h's QuantMmaLayout)
  int table_stride, part_stride, x_stride;
  unsigned table_off, part_off, x_off;
};

// One super-block of rows g (pa) and g + 8 (pb) of a stage: its 16 MMA steps with every tile of
// 8 rows of x, added to acc. Lane (g, c) turns the 4 values of a step it holds per row into
// D * (q - offset) + Mn in x's type (quant::step_values: exact q - offset, one packed FMA with the
// sub-block's scales), the m16n8k16 A fragment. ta / tb: the rows' scale-table entries of this
// super-block (packed pairs of D, and of Mn); xr[t]: lane (g, c)'s place in row g + 8t of x's
// slice (byte offset 8c); sbl: the super-block's index in the slice.
template <QuantType Q, typename T, int NT, typename Entry>
__device__ __forceinline__ void mma_super_block(float (&acc)[NT][4], const uint8_t* pa,
                                                const uint8_t* pb, const Entry* ta, const Entry* tb,
                                                const uint8_t* const (&xr)[NT], int sbl, int c) {
  using F = QuantMma<Q>;
  const int x0 = 2 * 256 * sbl;  // bytes
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    uint32_t qa[4], qb[4];
    F::unit(pa, u, c, qa);
    F::unit(pb, u, c, qb);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int sub = F::sub(u, s);
      uint32_t a0, a1, a2, a3;
      quant::step_values<T, Q>(qa[s], ta[sub], a0, a2);
      quant::step_values<T, Q>(qb[s], tb[sub], a1, a3);
      const int off = x0 + 2 * F::elem(u, s);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const uint2 b = *reinterpret_cast<const uint2*>(xr[t] + off);
        device::mma<T>(acc[t], a0, a1, a2, a3, b.x, b.y);
      }
    }
  }
}

// NT: tiles of 8 rows of x (M <= 8 NT). T: the 16-bit type of x.
template <QuantType Q, typename T, int NT>
__global__ void __launch_bounds__(kThreads, 1) linear_quant_mma_kernel(const QmmaParams<T> p) {
  using F = QuantMma<Q>;
  constexpr QuantMmaFormat kFormat = quant_mma_format(Q);
  constexpr int CB = kFormat.chunk_sbs, SBB = F::kSbBytes, SUBS = F::kSubs;
  constexpr int kRowChunks = (CB * SBB + 15) / 16 + 1;  // QuantMmaLayout::row_chunks
  constexpr int kRowStride = (kRowChunks | 1) * 16;     // QuantMmaLayout::row_stride
  // Rows of whole 16-byte chunks (every format but Q6_K; the weights are 16-byte aligned): a
  // stage's bytes of a row start at its slot row's first byte and never run past the matrix.
  constexpr bool kAlignedRows = (CB * SBB) % 16 == 0 && SBB % 16 == 0;
  using Entry = quant::ScaleEntry<F::kMin>;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ bool s_last;

  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, c = lane & 3;
  const int wk = warp % p.warps_k, wr = warp / p.warps_k;
  const int ks = static_cast<int>(blockIdx.x), rg = static_cast<int>(blockIdx.y);
  const int slice0 = ks * p.slice_sbs, slice1 = min(slice0 + p.slice_sbs, p.ksb);
  const int per_warp = (p.slice_sbs + p.warps_k - 1) / p.warps_k;
  const int my0 = min(slice0 + wk * per_warp, slice1), my1 = min(my0 + per_warp, slice1);
  const int chunks = (my1 - my0 + CB - 1) / CB;  // stages per round
  const int tiles = (p.n + 15) / 16;
  const int tile0 = rg * p.tiles_per_cta, tile1 = min(tile0 + p.tiles_per_cta, tiles);
  const int rounds = (tile1 - tile0 + p.warps_r - 1) / p.warps_r;
  const int total = rounds * chunks;

  uint8_t* const ring = smem + static_cast<size_t>(warp) * kStages * 16 * kRowStride;
  Entry* const table = reinterpret_cast<Entry*>(smem + p.table_off) + warp * 16 * p.table_stride;
  float* const part_s = reinterpret_cast<float*>(smem + p.part_off);
  uint8_t* const xs = smem + p.x_off;

  // The stages of this warp in order: stage i is round i / chunks (tile tile0 + round * warps_r +
  // wr), super-blocks my0 + (i % chunks) * CB .. + CB - 1 (fewer at the end of the warp's range),
  // in slot i % kStages. The round and chunk of the next stage to request are counted here. Lanes
  // 2r and 2r + 1 copy row r's 16-byte chunks, alternately: one row address per lane and stage.
  const int copy_row = lane >> 1, copy_first = lane & 1;
  int it_round = 0, it_chunk = 0, issued = 0;
  auto issue_next = [&]() {
    const int tile = tile0 + it_round * p.warps_r + wr;
    if (issued < total && tile < tile1) {
      const int sb0 = my0 + it_chunk * CB, nsb = min(CB, my1 - sb0);
      uint8_t* dst = ring + (issued % kStages) * 16 * kRowStride + copy_row * kRowStride;
      const int64_t row = min(int64_t{tile} * 16 + copy_row, int64_t{p.n} - 1);
      const int64_t a = row * p.row_bytes + int64_t{sb0} * SBB;
      if constexpr (kAlignedRows) {  // whole 16-byte chunks, all inside the matrix
        const int nvec = (CB == 1 ? 1 : nsb) * (SBB / 16);  // a stage has >= 1 super-block
        const uint8_t* src = p.w + a;
        const auto to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
#pragma unroll
        for (int k = 0; k < (CB * SBB / 16 + 1) / 2; ++k) {
          const int v = 2 * k + copy_first;
          if (v < nvec) device::cp_async16_stream_at(to + 16 * v, src + 16 * v);
        }
      } else {
        const int64_t a0 = a & ~int64_t{15};
        const int nvec = static_cast<int>((a + int64_t{nsb} * SBB - a0 + 15) >> 4);
        device::cp_async16_stream_chunks(dst, p.w, p.w_bytes, a0, nvec, copy_first, 2);
      }
    }
    if (issued < total) {
      if (++it_chunk == chunks) it_chunk = 0, ++it_round;
      ++issued;
    }
    device::cp_async_commit();  // an empty group past the end keeps the count
  };

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue_next();  // weights: before the wait
  pdl_wait();
  pdl_launch_dependents();

  // x's slice: [m][slice values] 16-bit, x_stride bytes apart.
  const int slice_len = (slice1 - slice0) * 256;
  {
    // Four 16-byte vectors per thread in flight at a time; (row, vector) stepped without
    // divisions.
    const int vecs = slice_len / 8, total = p.m * vecs;
    const int step_r = kThreads / vecs, step_v = kThreads % vecs;
    const T* x0 = p.x + int64_t{slice0} * 256;
    int r = static_cast<int>(threadIdx.x) / vecs, v = static_cast<int>(threadIdx.x) % vecs;
    for (int idx = static_cast<int>(threadIdx.x); idx < total; idx += 4 * kThreads) {
      uint4 val[4];
      int dst[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        dst[u] = -1;
        if (idx + u * kThreads < total) {
          val[u] = __ldg(reinterpret_cast<const uint4*>(x0 + int64_t{r} * p.ldx) + v);
          dst[u] = r * p.x_stride + 16 * v;
        }
        r += step_r;
        v += step_v;
        if (v >= vecs) v -= vecs, ++r;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (dst[u] >= 0) *reinterpret_cast<uint4*>(xs + dst[u]) = val[u];
    }
  }
  __syncthreads();
  const uint8_t* xr[NT];  // rows past m read row m - 1 (their sums are never stored)
#pragma unroll
  for (int t = 0; t < NT; ++t) xr[t] = xs + min(g + 8 * t, p.m - 1) * p.x_stride + 8 * c;

  float* const mine = part_s + warp * 16 * p.part_stride;
  // A round's sums: (warp of the round's tiles w2, row + 16 tok) items, this thread's first and
  // its step, the same every round.
  const int sum_items = p.warps_r * 16 * p.m;
  const int sum_w2 = static_cast<int>(threadIdx.x) / (16 * p.m);
  const int sum_rem = static_cast<int>(threadIdx.x) % (16 * p.m);
  const int sum_step_w2 = kThreads / (16 * p.m), sum_step_rem = kThreads % (16 * p.m);
  int i = 0;
  for (int round = 0; round < rounds; ++round) {
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    const int tile = tile0 + round * p.warps_r + wr;
    for (int j = 0; j < chunks; ++j, ++i) {
      // Stage i + kStages - 1, into the slot computed in the previous iteration (read before its
      // closing __syncwarp).
      issue_next();
      device::cp_async_wait<kStages - 1>();
      __syncwarp();
      if (tile < tile1) {
        const uint8_t* slot = ring + (i % kStages) * 16 * kRowStride;
        const int sb0 = my0 + j * CB, nsb = min(CB, my1 - sb0);
        // Row rr's first byte of the stage (its offset in its first 16-byte chunk).
        auto row_data = [&](int rr) {
          if constexpr (kAlignedRows) {
            return slot + rr * kRowStride;
          } else {
            const int64_t row = min(int64_t{tile} * 16 + rr, int64_t{p.n} - 1);
            const int delta = static_cast<int>((row * p.row_bytes + int64_t{sb0} * SBB) & 15);
            return slot + rr * kRowStride + delta;
          }
        };
#pragma unroll
        for (int jj = 0; jj < CB; ++jj) {
          if (jj < nsb)
            quant::pack_scales_half<T, Q>(row_data(lane & 15) + jj * SBB, lane >> 4,
                                          table + (lane & 15) * p.table_stride + jj * SUBS);
        }
        __syncwarp();
        const uint8_t* pa = row_data(g);
        const uint8_t* pb = row_data(g + 8);
        const Entry* ta = table + g * p.table_stride;
        const Entry* tb = table + (g + 8) * p.table_stride;
        for (int jj = 0; jj < nsb; ++jj)
          mma_super_block<Q, T, NT>(acc, pa + jj * SBB, pb + jj * SBB, ta + jj * SUBS,
                                    tb + jj * SUBS, xr, sb0 + jj - slice0, c);
      }
      __syncwarp();
    }
    // The round's sums: every warp's accumulators, then each (row, row of x) of the round's tiles
    // added over warps_k in warp order.
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int col = 8 * t + 2 * c;
      mine[g * p.part_stride + col] = acc[t][0];
      mine[g * p.part_stride + col + 1] = acc[t][1];
      mine[(g + 8) * p.part_stride + col] = acc[t][2];
      mine[(g + 8) * p.part_stride + col + 1] = acc[t][3];
    }
    __syncthreads();
    int w2 = sum_w2, rem = sum_rem;
    for (int idx = static_cast<int>(threadIdx.x); idx < sum_items; idx += kThreads) {
      const int row = rem & 15, tok = rem >> 4;
      const int tile2 = tile0 + round * p.warps_r + w2;
      const int64_t n_idx = int64_t{tile2} * 16 + row;
      const float* src = part_s + (w2 * p.warps_k * 16 + row) * p.part_stride + tok;
      w2 += sum_step_w2;
      rem += sum_step_rem;
      if (rem >= 16 * p.m) rem -= 16 * p.m, ++w2;
      if (tile2 >= tile1 || n_idx >= p.n) continue;
      float s = 0.0f;
#pragma unroll
      for (int k2 = 0; k2 < 8; ++k2)  // warps_k <= 8 (the policy's plans)
        if (k2 < p.warps_k) s += src[k2 * 16 * p.part_stride];
      if (p.slices == 1) {
        if (p.bias != nullptr) s += device::load_float(p.bias, n_idx, p.bias_kind);
        device::store_float(p.y, tok * p.ldy + n_idx, p.y_kind, s);
      } else {
        p.part[(int64_t{ks} * p.m + tok) * p.n + n_idx] = s;
      }
    }
    __syncthreads();  // part_s is written again by the next round
  }

  if (p.slices == 1) return;
  // The last CTA of the row group to finish adds the slices in order.
  __threadfence();  // this CTA's partial sums, before its arrival
  __syncthreads();
  if (threadIdx.x == 0)
    s_last = atomicAdd(p.counters + rg, 1u) == static_cast<unsigned>(p.slices - 1);
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  // kMergeBatch outputs per thread at a time, the loads of all of them issued before any sum is
  // stored: the partial sums come from L2, and one output at a time waits a round trip per slice.
  constexpr int kMergeBatch = 4;
  const int64_t row0 = int64_t{tile0} * 16;
  const int rows = static_cast<int>(min(int64_t{tile1} * 16, int64_t{p.n}) - row0);
  const int outputs = rows * p.m, step_tok = kThreads / rows, step_nr = kThreads % rows;
  const int64_t slice_stride = int64_t{p.m} * p.n;
  int tok = static_cast<int>(threadIdx.x) / rows, nr = static_cast<int>(threadIdx.x) % rows;
  for (int idx = static_cast<int>(threadIdx.x); idx < outputs; idx += kMergeBatch * kThreads) {
    float s[kMergeBatch];
    int64_t at[kMergeBatch], n_idx[kMergeBatch];
    int toks[kMergeBatch];
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      s[u] = 0.0f;
      toks[u] = idx + u * kThreads < outputs ? tok : -1;
      n_idx[u] = row0 + nr;
      at[u] = int64_t{tok} * p.n + n_idx[u];
      tok += step_tok;
      nr += step_nr;
      if (nr >= rows) nr -= rows, ++tok;
    }
    for (int q = 0; q < p.slices; ++q) {
#pragma unroll
      for (int u = 0; u < kMergeBatch; ++u)
        if (toks[u] >= 0) s[u] += __ldcg(p.part + q * slice_stride + at[u]);
    }
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      if (toks[u] < 0) continue;
      if (p.bias != nullptr) s[u] += device::load_float(p.bias, n_idx[u], p.bias_kind);
      device::store_float(p.y, toks[u] * p.ldy + n_idx[u], p.y_kind, s[u]);
    }
  }
  if (threadIdx.x == 0) p.counters[rg] = 0;  // every slice has arrived: zero for the next launch
}

template <QuantType Q, typename T, int NT>
void launch_mma(const QmmaParams<T>& p, const QuantMmaPlan& plan, size_t smem_limit,
                cudaStream_t stream) {
  constexpr auto kernel = &linear_quant_mma_kernel<Q, T, NT>;
  allow_dynamic_smem<kernel>(smem_limit);  // once per device: the most any plan takes
  launch_pdl(kernel,
             dim3(static_cast<unsigned>(plan.slices), static_cast<unsigned>(plan.row_groups)),
             dim3(kThreads), plan.smem_bytes, stream, p);
}

template <QuantType Q, typename T>
void launch_mma_rows(const QmmaParams<T>& p, const QuantMmaPlan& plan, size_t smem_limit,
                     cudaStream_t stream) {
  if (p.m <= 8) return launch_mma<Q, T, 1>(p, plan, smem_limit, stream);
  if (p.m <= 16) return launch_mma<Q, T, 2>(p, plan, smem_limit, stream);
  if (p.m <= 24) return launch_mma<Q, T, 3>(p, plan, smem_limit, stream);
  if (p.m <= 32) return launch_mma<Q, T, 4>(p, plan, smem_limit, stream);
  // 8 NT must equal the layout's rows of partial sums (quant_mma_layout: m rounded up to 8).
  if (p.m <= 40) return launch_mma<Q, T, 5>(p, plan, smem_limit, stream);
  launch_mma<Q, T, 6>(p, plan, smem_limit, stream);
}
static_assert(kQuantMmaMaxRows == 48, "launch_mma_rows covers 48 rows");

void linear_mma(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                const Tensor& y, const QuantMmaPlan& plan, unsigned* counters) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, n = w.n;
  const QuantMmaLayout layout = quant_mma_layout(w.quant, m, plan.slice_sbs);
  DSPARK_CHECK_KIND(internal, plan.warps_k >= 1 && plan.warps_k <= 8,
                    "linear_blocks: the plan's {} warps per tile (the kernel adds up to 8)",
                    plan.warps_k);
  DSPARK_CHECK_KIND(internal, layout.bytes == plan.smem_bytes,
                    "linear_blocks: the plan's shared memory {} != the layout's {}",
                    plan.smem_bytes, layout.bytes);
  float* part = nullptr;
  if (plan.slices > 1)
    part =
        static_cast<float*>(ctx.scratch(static_cast<size_t>(plan.slices * m * n) * sizeof(float)));
  const bool has_bias = bias.defined() && bias.numel() > 0;
  dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
    if constexpr (!std::is_same_v<TX, float>) {
      using T = device_t<TX>;
      QmmaParams<T> p{};
      p.w = static_cast<const uint8_t*>(w.data.data());
      p.row_bytes = w.data.size(1);
      p.w_bytes = w.n * p.row_bytes;
      p.x = device_ptr<TX>(x);
      p.ldx = m == 1 ? w.k : xv.stride;
      p.y = y.data();
      p.y_kind = float_kind(y.dtype());
      p.ldy = m == 1 ? n : yv.stride;
      p.bias = has_bias ? bias.data() : nullptr;
      p.bias_kind = has_bias ? float_kind(bias.dtype()) : device::FloatKind::f32;
      p.part = part;
      p.counters = counters;
      p.m = static_cast<int>(m);
      p.n = static_cast<int>(n);
      p.ksb = static_cast<int>(w.k / 256);
      p.slices = plan.slices;
      p.slice_sbs = plan.slice_sbs;
      p.warps_k = plan.warps_k;
      p.warps_r = plan.warps_r;
      p.tiles_per_cta = plan.tiles_per_cta;
      p.table_stride = layout.table_stride;
      p.part_stride = layout.part_stride;
      p.x_stride = layout.x_stride;
      p.table_off = static_cast<unsigned>(layout.table);
      p.part_off = static_cast<unsigned>(layout.part);
      p.x_off = static_cast<unsigned>(layout.x);
      const size_t limit = quant_mma_smem_limit(ctx.cuda_caps());
      quant::dispatch_quant(w.quant, [&]<QuantType Q>(quant::QuantTag<Q>) {
        constexpr QuantMmaFormat f = quant_mma_format(Q);
        DSPARK_CHECK_KIND(
            internal, layout.row_stride == (((f.chunk_sbs * f.sb_bytes + 15) / 16 + 1) | 1) * 16,
            "linear_blocks: the layout's row stride {}", layout.row_stride);
        launch_mma_rows<Q, T>(p, plan, limit, stream_of(ctx));
      });
    }
  });
}

// The prefill path: chunks of weight rows dequantized into scratch as x's dtype, then the dense
// linear into the chunk's columns of y.
void linear_dequantized(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                        const Tensor& y) {
  const DType dtype = x.dtype();
  const int64_t n = w.n, k = w.k;
  const int64_t row_bytes = k * static_cast<int64_t>(dtype_size(dtype));
  const int64_t rows = std::clamp<int64_t>(
      static_cast<int64_t>(kDequantChunkBytes) / std::max<int64_t>(row_bytes, 1), 1, n);
  void* buffer = ctx.scratch(static_cast<size_t>(rows * row_bytes));
  const bool has_bias = bias.defined() && bias.numel() > 0;
  for (int64_t n0 = 0; n0 < n; n0 += rows) {
    const int64_t nr = std::min(rows, n - n0);
    const Tensor dense(buffer, dtype, Shape{nr, k}, ctx.device());
    dequantize_rows(ctx, w, n0, dense);
    const Tensor ys = nr == n ? y : y.slice(1, n0, n0 + nr);
    const Tensor bs = has_bias ? (nr == n ? bias : bias.slice(0, n0, n0 + nr)) : Tensor{};
    cuda::linear(ctx, x, dense, bs, ys);
  }
}

LinearBlocksShape blocks_shape(const Tensor& x, const WeightMatrix& w, DType y) {
  const RowView xv = row_view(x);
  LinearBlocksShape s;
  s.m = xv.rows;
  s.n = w.n;
  s.k = w.k;
  s.quant = w.quant;
  s.x = x.dtype();
  s.y = y;
  s.aligned = device::is_aligned16(w.data.data()) && device::is_aligned16(x.data()) &&
              (xv.rows <= 1 || xv.stride % 8 == 0);
  return s;
}

}  // namespace

void linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                   const Tensor& y) {
  if (row_view(x).rows == 0 || w.n == 0) return;
  const LinearBlocksShape s = blocks_shape(x, w, y.dtype());
  // Null when first asked for inside a graph capture: no K split then.
  unsigned* counters =
      arrival_counters(ctx, ArrivalPool::linear_quant, static_cast<size_t>(kQuantMmaMaxRowGroups));
  const LinearBlocksChoice choice =
      choose_linear_blocks(s, ctx.cuda_caps(), ctx.cuda_tuning(), counters != nullptr);
  if (choice.kernel == LinearBlocksKernel::gemv)
    return linear_blocks_gemv(ctx, x, w, bias, y, choice.gemv_plan);
  if (choice.kernel == LinearBlocksKernel::mma)
    return linear_mma(ctx, x, w, bias, y, choice.plan, counters);
  linear_dequantized(ctx, x, w, bias, y);
}

bool linear_blocks_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& out) {
  if (row_view(x).rows == 0 || w.n == 0) return false;
  const LinearBlocksChoice choice = choose_linear_blocks(blocks_shape(x, w, out.dtype()),
                                                         ctx.cuda_caps(), ctx.cuda_tuning(), false);
  if (choice.kernel != LinearBlocksKernel::gemv || !gemv_swiglu_fits(w, choice.gemv_plan))
    return false;
  linear_blocks_gemv_swiglu(ctx, x, w, out, choice.gemv_plan);
  return true;
}

bool linear_blocks_pair(Context& ctx, const Tensor& x, const WeightMatrix& wa, const Tensor& bias_a,
                        const Tensor& ya, const WeightMatrix& wb, const Tensor& bias_b,
                        const Tensor& yb) {
  if (row_view(x).rows == 0 || wa.n == 0 || wb.n == 0) return false;
  const LinearBlocksChoice ca = choose_linear_blocks(blocks_shape(x, wa, ya.dtype()),
                                                     ctx.cuda_caps(), ctx.cuda_tuning(), false);
  const LinearBlocksChoice cb = choose_linear_blocks(blocks_shape(x, wb, yb.dtype()),
                                                     ctx.cuda_caps(), ctx.cuda_tuning(), false);
  if (ca.kernel != LinearBlocksKernel::gemv || cb.kernel != LinearBlocksKernel::gemv) return false;
  return linear_blocks_gemv_pair(ctx, x, GemvPart{&wa, bias_a, ya, ca.gemv_plan},
                                 GemvPart{&wb, bias_b, yb, cb.gemv_plan});
}

}  // namespace dspark::cuda
