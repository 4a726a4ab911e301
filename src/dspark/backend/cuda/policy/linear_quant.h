// Which kernel runs linear with block-quantized weights on CUDA (kernels/linear_quant.cu), and how
// the tensor-core kernel cuts the work: pure functions of the call's shape, quant type and dtypes,
// the device's caps and the context's tuning. Host-only (policy/device.h); the constexpr tables
// are also read by the kernels.
//
// The kernels:
//  - gemv: 1..kQuantGemvMaxRows rows of x of any float dtype (decode, draft steps). x is rounded
//    to int8 per block of 32 as on the CPU, and each weight word of 4 values meets 4 of x in one
//    dp4a; each weight byte is read once per call, by cp.async into a warp's shared-memory ring.
//  - mma: 1..48 rows of bf16 / f16 x (decode, verify, draft, batched decode). Each weight byte is
//    read once per call, by cp.async into a warp's shared-memory ring, dequantized in registers to
//    x's type and multiplied with every row of x on tensor cores.
//  - dequantize: every other call (more rows: prefill; f32 x; K not a multiple of 256; unaligned
//    operands): the weight rows dequantized into the context's scratch as x's dtype, a chunk of
//    rows at a time, each chunk through the dense linear (cuBLASLt, or the one-row kernel).
// With batch-invariant numerics (Tuning::batch_invariant, `--exact`) gemv runs at every M, on
// chunks of kQuantGemvMaxRows rows, so that a row's bits do not depend on the other rows.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dspark/backend/cuda/policy/device.h"
#include "dspark/core/dtype.h"
#include "dspark/core/quant.h"

namespace dspark::cuda {

// A format as the tensor-core kernel sees it: super-blocks of 256 values (one K-quant block, or
// eight legacy blocks of 32).
struct QuantMmaFormat {
  int sb_bytes;   // bytes of a super-block
  int chunk_sbs;  // super-blocks per pipeline stage of a warp (16 weight rows each)
  int subs;       // scale sub-blocks per super-block
  bool has_min;   // value = D * q + Mn with Mn != 0: the scale table also holds Mn
};

constexpr QuantMmaFormat quant_mma_format(QuantType t) {
  switch (t) {
    case QuantType::q4_0:
      return {144, 1, 8, false};
    case QuantType::q4_1:
      return {160, 1, 8, true};
    case QuantType::q5_0:
      return {176, 1, 8, false};
    case QuantType::q5_1:
      return {192, 1, 8, true};
    case QuantType::q8_0:
      return {272, 1, 8, false};
    case QuantType::q4_k:
      return {144, 1, 8, true};
    case QuantType::q5_k:
      return {176, 1, 8, true};
    case QuantType::q6_k:
      return {210, 1, 16, false};
    case QuantType::q8_a:
      return {288, 1, 8, true};
    case QuantType::q4_a64:  // MLX's groups of 64 / 128: uploaded as Q4_1 / Q8_A blocks
    case QuantType::q4_a128:
    case QuantType::q8_a64:
    case QuantType::q8_a128:
      break;
  }
  return {0, 1, 1, false};
}

inline constexpr int kQuantMmaWarps = 16;    // per CTA: warps_k x warps_r
inline constexpr int kQuantMmaStages = 2;    // a warp's ring: one stage in flight ahead
inline constexpr int kQuantMmaMaxRows = 48;  // rows of x (tiles of 8: up to 6)
inline constexpr int kQuantMmaMaxSlices = 32;
// Arrival counters of the K split (one per row group: kernels/arrival_counters.h).
inline constexpr int kQuantMmaMaxRowGroups = 4096;
// The most scratch a K split's partial sums (slices x m x n f32) may take: 48 rows of a 128,256-row
// LM head in 8 slices need 197 MB.
inline constexpr int64_t kQuantMmaMaxPartialBytes = int64_t{256} << 20;

// The tensor-core kernel's dynamic shared memory for m rows of x and slices of `slice_sbs`
// super-blocks: byte offsets of its regions (16-byte aligned) and their strides.
struct QuantMmaLayout {
  int row_stride = 0;    // bytes between the weight rows of a stage (an odd multiple of 16)
  int row_chunks = 0;    // 16-byte copies per weight row and stage, at most
  int table_stride = 0;  // entries between the rows of a warp's scale table (odd)
  int part_stride = 0;   // floats between the rows of a warp's partial sums
  int x_stride = 0;      // bytes between the rows of x's slice (32 mod 128)
  int mp = 0;            // rows of x rounded up to 8
  size_t ring = 0;       // kQuantMmaWarps x kQuantMmaStages stages of 16 rows
  size_t table = 0;      // per warp: [16][table_stride] of D (or D, Mn) as pairs of x's type
  size_t part = 0;       // per warp: [16][part_stride] f32 partial sums of a row tile
  size_t x = 0;          // [m][x_stride]: x's slice, 16-bit
  size_t bytes = 0;      // total
};
QuantMmaLayout quant_mma_layout(QuantType q, int64_t m, int64_t slice_sbs);

// The dynamic shared memory the tensor-core kernel may use: 226 KB on sm_90, 98 KB before (1 KB
// under the opt-in limits, for the kernel's static shared memory).
size_t quant_mma_smem_limit(const DeviceCaps& caps);

// How the tensor-core kernel cuts a call: K into `slices` of `slice_sbs` super-blocks (CTAs of one
// slice add partial sums; the last CTA of a row group to finish adds the slices in order), the
// row tiles of 16 into `row_groups` groups of `tiles_per_cta`; a grid of slices x row_groups CTAs
// (at most one per multiprocessor). In a CTA, warps_k warps split the slice's super-blocks and
// warps_r tiles are in flight at once; a round of warps_r tiles ends with the warps' sums added in
// warp order.
struct QuantMmaPlan {
  int slices = 0;
  int slice_sbs = 0;
  int warps_k = 0;
  int warps_r = 0;
  int tiles_per_cta = 0;
  int row_groups = 0;
  size_t smem_bytes = 0;
};

// The few-row kernel (kernels/linear_quant_gemv.cu): CTAs of kQuantGemvWarps warps, each warp a
// ring of quant_gemv_stages(q) slots of kQuantGemvStageSbs super-blocks of one weight row (a lane
// per unit of 64 values): 4 slots for the formats of up to 176 bytes per super-block, 3 for the
// larger (Q6_K, Q8_0: their stages are larger); all but one are in flight ahead of the math.
inline constexpr int kQuantGemvWarps = 16;
inline constexpr int kQuantGemvStageSbs = 8;
constexpr int quant_gemv_stages(QuantType q) {
  return quant_mma_format(q).sb_bytes <= 176 ? 4 : 3;
}
inline constexpr int kQuantGemvMaxRows = 4;

// Its dynamic shared memory: the warps' rings, their partial sums, and x's rows rounded to int8
// (per row: q in 320 bytes per super-block of 256 values, then f32 d and s per block of 32, then
// int32 sums of q per 16 values).
struct QuantGemvLayout {
  int slot = 0;         // bytes of a ring slot: a stage, its start anywhere in a 16-byte chunk
  int x_q_bytes = 0;    // bytes of a row's q, padding included (a multiple of 16)
  int x_row_bytes = 0;  // bytes of a row of the x region (a multiple of 16)
  unsigned part = 0;    // byte offsets of the regions
  unsigned bars = 0;    // the warps' slot barriers (8 bytes each; sm_90)
  unsigned x = 0;
  size_t bytes = 0;  // total
};
QuantGemvLayout quant_gemv_layout(QuantType q, int64_t m, int64_t k);

// How the few-row kernel cuts a call: tiles of kQuantGemvWarps / warps_k weight rows, warps_k
// warps per row splitting its super-blocks. Chosen from n, k and the SM count only (not m), so
// that a row's sums are added in the same order for every m.
struct QuantGemvPlan {
  int warps_k = 1;
  int tiles = 0;
  size_t smem_bytes = 0;
};

// Two few-row products of one x whose weights differ in type (a stacked projection's parts, e.g.
// Q4_K q/k rows and Q6_K v rows) in one launch: `total` CTAs, grid_a of them over a's tiles and
// the rest over b's (each part keeps its own plan, so its bits are those of its own launch).
// grid_a minimises the larger of the two shares' bytes per CTA (the most tiles a CTA of the share
// takes x the bytes of a tile); the fewer CTAs for a on ties.
struct QuantGemvPairSplit {
  int grid_a = 0, grid_b = 0;
};
QuantGemvPairSplit gemv_pair_split(int64_t tiles_a, int64_t tile_bytes_a, int64_t tiles_b,
                                   int64_t tile_bytes_b, int64_t total);

enum class LinearBlocksKernel {
  gemv,        // kernels/linear_quant_gemv.cu, dp4a
  mma,         // kernels/linear_quant.cu, tensor cores
  dequantize,  // rows dequantized into scratch, then the dense linear
};

// One call y[m, n] = x[m, k] . dequantize(w)^T as the choice sees it.
struct LinearBlocksShape {
  int64_t m = 0, n = 0, k = 0;
  QuantType quant = QuantType::q8_0;
  DType x = DType::bf16, y = DType::bf16;
  // w and x 16-byte aligned and (with several rows) x's rows a multiple of 8 elements apart.
  bool aligned = false;
};

struct LinearBlocksChoice {
  LinearBlocksKernel kernel = LinearBlocksKernel::dequantize;
  QuantMmaPlan plan;        // kernel == mma
  QuantGemvPlan gemv_plan;  // kernel == gemv
};

// The few-row kernel for 1..kQuantGemvMaxRows rows of any float x and y, K a multiple of 256, w
// and x aligned, compute capability 8+, when its shared memory fits. Otherwise the tensor-core
// kernel for 1..min(t.linear_blocks_max_rows, 48) rows of bf16 / f16 x, y f32 or
// x's dtype, K a multiple of 256, aligned, compute capability 8+, and a plan whose shared memory
// fits; its plan is the cheapest of the candidates by an estimate of the busiest warp's bytes
// (weights, plus a share of x's slice and of the partial sums, which come from L2) with a cost per
// round and per split; a split's partial sums within kQuantMmaMaxPartialBytes. `split_k` false: no
// K split (the arrival counters are unavailable: first used inside a graph capture). Everything
// else: dequantize (then the dense linear).
// With t.batch_invariant the few-row kernel at every M (over chunks of kQuantGemvMaxRows rows)
// where its shape fits and its shared memory for a full chunk does; otherwise dequantize at every
// M (then the dense linear's invariant kernel).
LinearBlocksChoice choose_linear_blocks(const LinearBlocksShape& s, const DeviceCaps& caps,
                                        const Tuning& t, bool split_k = true);

}  // namespace dspark::cuda
