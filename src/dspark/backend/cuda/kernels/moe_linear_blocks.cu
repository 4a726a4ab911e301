// moe_linear (contract: ops/moe.h) with block-quantized experts (GGUF blocks, stacked along the
// rows) on the device: every active expert's grouped rows times its matrix, in integers as the
// few-row kernel computes a row (quant_dp4a.cuh: x rounded per block of 32 to int8, one dp4a per
// weight word of 4 values, the integer sums scaled per sub-block in f32).
//  - x: one kernel (a CTA per row) rounds the m grouped rows into the context's scratch (the x
//    region layout of quant_dp4a.cuh), padded by kMaxRows rows: a group of C rows past the
//    expert's last reads them and never stores their sums. With moe_linear_gather's `order` it
//    reads grouped row r from the tokens' row order[r] (no gathered copy of x); with
//    moe_linear_swiglu's gate and up rows it computes SwiGLU's outputs as it reads them (no
//    SwiGLU launch, no act rows).
//  - Launches: the product is a programmatic dependent of the rounding kernel, which lets it
//    start at once; its CTAs read the grouping (written before the rounding kernel started) and
//    request their first weight stages, then wait for x (pdl.cuh).
//  - Grid: x over tiles of rows_per_cta weight rows of one expert, y over the slots of the
//    active-expert list (moe_group's `active`); a CTA whose slot is past the list's length
//    returns at once, so only the chosen experts' weights are read.
//  - A warp owns kPasses groups of P consecutive weight rows. Lane (j, b, u) takes row j of the
//    group, super-block b of the stage and unit u of 64 values: L = 4 x (super-blocks of a stage,
//    rounded up to a power of two) lanes per row, P = 32 / L rows per group (K of 256: 8 rows at
//    once; K of 2,048 or more: one row, stages of 8 super-blocks). The stages stream through a
//    ring of kSlots slots of the warp's shared memory by cp.async, kSlots - 1 ahead of the math
//    (one row of x and K <= 2,048: a warp's kPasses weight rows all in flight from the start).
//  - Rows of x in groups of C (1, 2 or 4, from the most rows an expert can have): a group past an
//    expert's first streams its weights again (from L2).
//  - Sums: a lane adds its units over the row's stages in order, then the row's L lanes a xor
//    butterfly: the order depends on K only, so a row's result does not depend on how many rows
//    the call or its expert has.
#include <algorithm>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/mma.cuh"
#include "dspark/backend/cuda/device/swiglu.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/kernels/quant_blocks.cuh"
#include "dspark/backend/cuda/kernels/quant_dp4a.cuh"
#include "dspark/backend/cuda/policy/linear_quant.h"

namespace dspark::cuda {
namespace {

using quant::QuantMma;
using quant::XView;

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kStageSbs = 8;  // super-blocks of a stage: 8 x 4 units = a warp's lanes
constexpr int kPasses = 4;    // row groups per warp
// Ring slots per warp: one row of x (decode) keeps all of a warp's passes in flight; with more
// rows each stage has that many times the math to hide the next one's copy behind.
template <int C>
constexpr int kSlots = C == 1 ? kPasses : 2;
constexpr int kMaxRows = 4;  // C

// A stage's bytes start anywhere in a 16-byte chunk: one chunk more than they fill.
template <QuantType Q>
constexpr int slot_bytes() {
  return (kStageSbs * QuantMma<Q>::kSbBytes + 15) / 16 * 16 + 16;
}

struct MoeBlocksParams {
  const uint8_t* w;  // [E * n][row_bytes]
  int64_t row_bytes, w_bytes;
  const uint8_t* xq;  // the x region: m + kMaxRows rows
  int x_row_bytes, x_q_bytes;
  void* y;  // [m][n], rows ldy apart
  device::FloatKind y_kind;
  int64_t ldy;
  const int32_t* offsets;  // moe_group's
  const int32_t* active;
  int n, k, ksb;
  int lanes_per_row, rows_per_pass, rows_per_cta;
};

// The rows to round (quant::quantize_x's parameters): m rows of x, ldx apart; with `order`, row r
// of the region from row order[r] of x. With up_offset > 0, x holds SwiGLU's gate and up halves
// (up at up_offset values past gate) and the values rounded are swiglu's outputs in act_kind
// (device/swiglu.cuh's value rounded as the swiglu op stores it: the bits it would write).
struct XRows {
  const void* x;
  device::FloatKind x_kind;
  int64_t ldx;
  int m, k;
  QuantGemvLayout layout;
  const int32_t* order;
  int64_t up_offset;
  device::FloatKind act_kind;

  __device__ __forceinline__ void load_row8(int r, int col, float (&v)[8]) const {
    quant::load8(x, r * ldx + col, x_kind, v);
    if (up_offset == 0) return;
    float u[8];
    quant::load8(x, r * ldx + up_offset + col, x_kind, u);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = device::round_to(device::swiglu_value(v[j], u[j]), act_kind);
    }
  }
};

// One CTA per row of x. The product after it may start at once (it waits for this grid before
// it reads x).
constexpr int kQuantizeThreads = 256;
template <QuantType Q>
__global__ void __launch_bounds__(kQuantizeThreads)
    moe_quantize_x_kernel(XRows src, uint8_t* region) {
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  const int64_t from = src.order != nullptr ? src.order[r] : r;
  src.x = static_cast<const uint8_t*>(src.x) +
          from * src.ldx * (src.x_kind == device::FloatKind::f32 ? 4 : 2);
  src.m = 1;
  quant::quantize_x<Q, kQuantizeThreads>(src, region + r * src.layout.x_row_bytes,
                                         static_cast<int>(threadIdx.x));
}

template <QuantType Q, int C>
__global__ void __launch_bounds__(kThreads) moe_linear_blocks_kernel(const MoeBlocksParams p) {
  using F = QuantMma<Q>;
  constexpr int SBB = F::kSbBytes, kSlot = slot_bytes<Q>();
  constexpr int kRing = kSlots<C>;
  __shared__ __align__(16) uint8_t smem[kWarps * kRing * kSlot];

  // The grouping (moe_group's) was written before the rounding kernel started, and the weights
  // never change: both are read before pdl_wait(); x after it. CTAs and warps without work leave
  // without waiting (freeing their slots at once): the first warp of slot 0 always has work and
  // waits, so the grid still completes after the kernel before it.
  const int slot_index = static_cast<int>(blockIdx.y);
  if (slot_index >= p.active[0]) return;
  const int64_t e = p.active[1 + slot_index];
  const int lo = p.offsets[e], hi = p.offsets[e + 1];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int P = p.rows_per_pass, L = p.lanes_per_row;
  const int row0 = static_cast<int>(blockIdx.x) * p.rows_per_cta + warp * kPasses * P;
  if (row0 >= p.n) return;  // no CTA-wide barrier below: a warp may leave
  const int passes = min(kPasses, (p.n - row0 + P - 1) / P);
  const int chunks = (p.ksb + kStageSbs - 1) / kStageSbs;  // stages per pass (1 when P > 1)
  const int total = passes * chunks;
  uint8_t* const ring = smem + warp * kRing * kSlot;
  const int j = lane / L, sbl = (lane % L) >> 2, u = lane & 3;
  const XView xv{p.xq, p.x_row_bytes, p.x_q_bytes, p.k / 32};

  // Stage s: pass s / chunks (rows row0 + pass P .. + P - 1, fewer at the end of the matrix),
  // super-blocks (s % chunks) kStageSbs .. + kStageSbs - 1 (fewer at the end of the row).
  auto stage_start = [&](int s, int& row, int& sb0, int& nsb) {
    row = row0 + (s / chunks) * P;
    sb0 = (s % chunks) * kStageSbs;
    nsb = min(kStageSbs, p.ksb - sb0);
    return (e * p.n + row) * p.row_bytes + int64_t{sb0} * SBB;
  };
  auto issue = [&](int s) {
    if (s < total) {
      int row, sb0, nsb;
      const int64_t a = stage_start(s, row, sb0, nsb);
      const int rows = min(P, p.n - row);
      const int64_t end = a + int64_t{rows - 1} * p.row_bytes + int64_t{nsb} * SBB;
      const int64_t a0 = a & ~int64_t{15};
      const int nvec = static_cast<int>((end - a0 + 15) >> 4);
      uint8_t* slot = ring + (s % kRing) * kSlot;
      for (int v = lane; v < nvec; v += 32) {
        const int64_t at = a0 + 16 * int64_t{v};
        const int64_t left = p.w_bytes - at;
        const int bytes = left >= 16 ? 16 : static_cast<int>(max(left, int64_t{0}));
        device::cp_async16_stream(slot + 16 * v, bytes > 0 ? p.w + at : p.w, bytes);
      }
    }
    device::cp_async_commit();  // an empty group past the end keeps the count
  };

  bool waited = false;
  for (int r0 = lo; r0 < hi; r0 += C) {
    float acc[C];
#pragma unroll
    for (int s = 0; s < kRing - 1; ++s) issue(s);
    if (!waited) {
      pdl_wait();
      pdl_launch_dependents();  // moe_combine may launch (it waits for this grid)
      waited = true;
    }
    for (int s = 0; s < total; ++s) {
      issue(s + kRing - 1);
      device::cp_async_wait<kRing - 1>();
      __syncwarp();
      int row, sb0, nsb;
      const int64_t a = stage_start(s, row, sb0, nsb);
      if (sb0 == 0) {
#pragma unroll
        for (int c = 0; c < C; ++c) acc[c] = 0.0f;
      }
      if (sbl < nsb && row + j < p.n) {
        // Rows of a group are whole rows (P > 1 only when a stage holds a row), row_bytes apart.
        const uint8_t* sb = ring + (s % kRing) * kSlot + (a & 15) + j * p.row_bytes + sbl * SBB;
        uint32_t q[16];
        quant::unit_words<Q>(sb, u, q);
        quant::unit_accumulate<Q, C>(acc, q, sb, u, sb0 + sbl, xv, r0);
      }
      __syncwarp();  // the slot is refilled by a later issue
      if (sb0 + nsb == p.ksb) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          float v = acc[c];
          for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
          if (lane % L == 0 && row + j < p.n && r0 + c < hi)
            device::store_float(p.y, (r0 + c) * p.ldy + row + j, p.y_kind, v);
        }
      }
    }
  }
}

template <QuantType Q>
void launch(const MoeBlocksParams& p, const XRows& src, uint8_t* region, int64_t max_rows,
            unsigned slots, cudaStream_t stream) {
  moe_quantize_x_kernel<Q>
      <<<static_cast<unsigned>(src.m), kQuantizeThreads, 0, stream>>>(src, region);
  DSPARK_CUDA_CHECK_LAUNCH();
  const dim3 grid(static_cast<unsigned>((p.n + p.rows_per_cta - 1) / p.rows_per_cta), slots);
  if (max_rows <= 1) {
    launch_pdl(moe_linear_blocks_kernel<Q, 1>, grid, dim3(kThreads), 0, stream, p);
  } else if (max_rows <= 2) {
    launch_pdl(moe_linear_blocks_kernel<Q, 2>, grid, dim3(kThreads), 0, stream, p);
  } else {
    launch_pdl(moe_linear_blocks_kernel<Q, kMaxRows>, grid, dim3(kThreads), 0, stream, p);
  }
}

}  // namespace

void moe_linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const MoeGroups& g,
                       const Tensor& y, bool gather, std::optional<DType> swiglu_act) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t experts = g.offsets.size(0) - 1, m = g.order.size(0), n = w.n / experts, k = w.k;
  DSPARK_CHECK(w.format == WeightFormat::blocks && k >= 256 && k % 256 == 0 &&
                   ctx.cuda_caps().compute_major >= 8,
               "moe_linear: block-quantized experts need K a multiple of 256 (got {}) and compute "
               "capability 8.0 or newer",
               k);
  DSPARK_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
               "moe_linear: x must be f32, bf16 or f16, not {}", dtype_name(x.dtype()));
  DSPARK_CHECK(device::is_aligned16(w.data.data()) && device::is_aligned16(x.data()) &&
                   (xv.stride * static_cast<int64_t>(dtype_size(x.dtype()))) % 16 == 0 &&
                   m <= (int64_t{1} << 20) && n * experts * w.data.size(1) > 0,
               "moe_linear: block-quantized experts need 16-byte aligned blocks and rows of x");
  const QuantGemvLayout layout = quant_gemv_layout(w.quant, m, k);
  auto* region = static_cast<uint8_t*>(
      ctx.scratch(static_cast<size_t>(m + kMaxRows) * static_cast<size_t>(layout.x_row_bytes)));
  const XRows src{x.data(),
                  float_kind(x.dtype()),
                  xv.stride,
                  static_cast<int>(m),
                  static_cast<int>(k),
                  layout,
                  gather ? g.order.data_as<int32_t>() : nullptr,
                  swiglu_act ? k : 0,
                  float_kind(swiglu_act.value_or(x.dtype()))};
  MoeBlocksParams p{};
  p.w = static_cast<const uint8_t*>(w.data.data());
  p.row_bytes = w.data.size(1);
  p.w_bytes = w.n * p.row_bytes;
  p.xq = region;
  p.x_row_bytes = layout.x_row_bytes;
  p.x_q_bytes = layout.x_q_bytes;
  p.y = y.data();
  p.y_kind = float_kind(y.dtype());
  p.ldy = yv.stride;
  p.offsets = g.offsets.data_as<int32_t>();
  p.active = g.active.data_as<int32_t>();
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.ksb = static_cast<int>(k / 256);
  int width = 1;  // a stage's super-blocks rounded up to a power of two
  while (width < std::min(p.ksb, kStageSbs)) width *= 2;
  p.lanes_per_row = 4 * width;
  p.rows_per_pass = 32 / p.lanes_per_row;
  p.rows_per_cta = kWarps * kPasses * p.rows_per_pass;
  // At most min(E, m) experts have rows; a token lists an expert at most once, so an expert has
  // at most as many rows as there are tokens.
  const auto slots = static_cast<unsigned>(std::min(experts, m));
  const int64_t max_rows = g.slots.size(0);
  quant::dispatch_quant(w.quant, [&]<QuantType Q>(quant::QuantTag<Q>) {
    launch<Q>(p, src, region, max_rows, slots, stream_of(ctx));
  });
}

}  // namespace dspark::cuda
