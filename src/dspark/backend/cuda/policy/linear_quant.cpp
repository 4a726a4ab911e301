#include "dspark/backend/cuda/policy/linear_quant.h"

#include <algorithm>
#include <limits>

#include "dspark/backend/cuda/policy/common.h"

namespace dspark::cuda {

using policy_detail::ceil_div;
using policy_detail::is_16bit;

namespace {

size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// The plan estimate counts bytes of the busiest warp's weight stream (at 75% of the H200's copy
// bandwidth a warp of a CTA per SM streams ~3 GB/s: 1 KB ~ 0.35 us). Besides its weights: the
// CTA's bytes from L2 (x's slice, read by every CTA before its math; the partial sums of a split),
// shared by its warps and weighted by kL2Weight (L2 -> SM at ~4x a warp's share of HBM), a
// round of row tiles (a barrier, the warps' sums added, the stores) and a K split (the last CTA's
// merge after all its own work: ~0.7 us). Not measured yet: guesses from the H200's figures.
constexpr double kL2Weight = 0.25;
constexpr double kRoundCost = 512;
constexpr double kSplitCost = 2048;

}  // namespace

QuantMmaLayout quant_mma_layout(QuantType q, int64_t m, int64_t slice_sbs) {
  const QuantMmaFormat f = quant_mma_format(q);
  QuantMmaLayout l;
  const int stage_row_bytes = f.chunk_sbs * f.sb_bytes;
  // A row's bytes start anywhere in a 16-byte chunk: one chunk more than they fill.
  l.row_chunks = (stage_row_bytes + 15) / 16 + 1;
  const int units = l.row_chunks | 1;  // odd: the 8 rows a warp's quads read hit distinct banks
  l.row_stride = units * 16;
  const size_t entry = f.has_min ? 8 : 4;
  l.table_stride = f.chunk_sbs * f.subs + 1;
  l.mp = static_cast<int>(ceil_div(m, 8) * 8);
  l.part_stride = l.mp + 1;
  l.x_stride = static_cast<int>(2 * slice_sbs * 256 + 32);
  l.ring = 0;
  l.table = l.ring + size_t{kQuantMmaWarps} * kQuantMmaStages * 16 * l.row_stride;
  l.part = l.table + round_up(size_t{kQuantMmaWarps} * 16 * l.table_stride * entry, 16);
  l.x = l.part + round_up(size_t{kQuantMmaWarps} * 16 * l.part_stride * sizeof(float), 16);
  l.bytes = l.x + static_cast<size_t>(m) * l.x_stride;
  return l;
}

QuantGemvLayout quant_gemv_layout(QuantType q, int64_t m, int64_t k) {
  const QuantMmaFormat f = quant_mma_format(q);
  QuantGemvLayout l;
  // A stage's bytes start anywhere in a 16-byte chunk, and the unaligned word reads of the last
  // value look up to 3 bytes past it.
  l.slot =
      static_cast<int>(round_up(static_cast<size_t>(kQuantGemvStageSbs * f.sb_bytes) + 19, 16));
  l.x_q_bytes = static_cast<int>(k / 256 * 320);
  l.x_row_bytes =
      static_cast<int>(round_up(static_cast<size_t>(l.x_q_bytes) + static_cast<size_t>(k / 32) * 8 +
                                    static_cast<size_t>(k / 16) * 4,
                                16));
  const size_t ring = size_t{kQuantGemvWarps} * quant_gemv_stages(q) * static_cast<size_t>(l.slot);
  l.part = static_cast<unsigned>(ring);
  l.bars =
      l.part + static_cast<unsigned>(round_up(size_t{kQuantGemvWarps} * kQuantGemvMaxRows * 4, 16));
  l.x = l.bars +
        static_cast<unsigned>(round_up(size_t{kQuantGemvWarps} * quant_gemv_stages(q) * 8, 16));
  l.bytes = l.x + static_cast<size_t>(m) * static_cast<size_t>(l.x_row_bytes);
  return l;
}

size_t quant_mma_smem_limit(const DeviceCaps& caps) {
  // A CTA may opt in to 227 KB (sm_90) or 99 KB (sm_86 / sm_89; an A100 allows more), static
  // shared memory included: 1 KB is left for the kernel's own.
  return caps.compute_major >= 9 ? size_t{226} * 1024 : size_t{98} * 1024;
}

namespace {

// The few-row kernel's plan for `rows` rows (at most kQuantGemvMaxRows): warps_k, the fewest warps
// per row for the least super-blocks per warp over the rounds of tiles, counting one CTA per SM
// (not the occupancy, which depends on the rows).
QuantGemvPlan gemv_plan(const LinearBlocksShape& s, const DeviceCaps& caps, int64_t rows) {
  QuantGemvPlan plan;
  const int64_t ksb = s.k / 256;
  const size_t smem = quant_gemv_layout(s.quant, rows, s.k).bytes;
  double best = std::numeric_limits<double>::infinity();
  for (int wk = 1; wk <= kQuantGemvWarps && wk <= ksb; wk *= 2) {
    const int64_t tiles = ceil_div(s.n, kQuantGemvWarps / wk);
    const int64_t rounds = ceil_div(tiles, caps.sm_count);
    const double cost =
        static_cast<double>(rounds * ceil_div(ksb, wk)) + 0.25 * static_cast<double>(rounds);
    if (cost < best) {
      best = cost;
      plan = QuantGemvPlan{wk, static_cast<int>(tiles), smem};
    }
  }
  return plan;
}

}  // namespace

QuantGemvPairSplit gemv_pair_split(int64_t tiles_a, int64_t tile_bytes_a, int64_t tiles_b,
                                   int64_t tile_bytes_b, int64_t total) {
  QuantGemvPairSplit split;
  if (tiles_a < 1 || tiles_b < 1) return split;
  total = std::clamp<int64_t>(total, 2, tiles_a + tiles_b);
  int64_t best = std::numeric_limits<int64_t>::max();
  for (int64_t ga = std::max<int64_t>(1, total - tiles_b); ga <= std::min(tiles_a, total - 1);
       ++ga) {
    const int64_t gb = total - ga;
    const int64_t cost =
        std::max(ceil_div(tiles_a, ga) * tile_bytes_a, ceil_div(tiles_b, gb) * tile_bytes_b);
    if (cost < best) {
      best = cost;
      split = QuantGemvPairSplit{static_cast<int>(ga), static_cast<int>(gb)};
    }
  }
  return split;
}

LinearBlocksChoice choose_linear_blocks(const LinearBlocksShape& s, const DeviceCaps& caps,
                                        const Tuning& t, bool split_k) {
  LinearBlocksChoice choice;  // dequantize
  const bool gemv_shape = s.aligned && s.n >= 1 && s.k >= 256 && s.k % 256 == 0 &&
                          caps.compute_major >= 8 && caps.sm_count >= 1 &&
                          s.n <= (int64_t{1} << 30);
  if (t.batch_invariant) {
    // Batch-invariant numerics: one kernel at every M. The few-row kernel rounds each row of x on
    // its own and adds a row's sums in an order set by N, K and the SM count, so above
    // kQuantGemvMaxRows rows it runs on chunks of that many rows (kernels/linear_quant_gemv.cu).
    // Where its shared memory for a full chunk does not fit, or the shape is not its, every M
    // dequantizes and the dense linear runs its batch-invariant kernel.
    if (!gemv_shape || s.m < 1 ||
        quant_gemv_layout(s.quant, kQuantGemvMaxRows, s.k).bytes > quant_mma_smem_limit(caps))
      return choice;
    choice.kernel = LinearBlocksKernel::gemv;
    choice.gemv_plan = gemv_plan(s, caps, std::min<int64_t>(s.m, kQuantGemvMaxRows));
    return choice;
  }
  if (gemv_shape && s.m >= 1 && s.m <= kQuantGemvMaxRows &&
      quant_gemv_layout(s.quant, s.m, s.k).bytes <= quant_mma_smem_limit(caps)) {
    choice.kernel = LinearBlocksKernel::gemv;
    choice.gemv_plan = gemv_plan(s, caps, s.m);
    return choice;
  }
  const int64_t max_rows = std::min<int64_t>(t.linear_blocks_max_rows, kQuantMmaMaxRows);
  const bool fits = s.m >= 1 && s.m <= max_rows && is_16bit(s.x) &&
                    (s.y == DType::f32 || s.y == s.x) && s.aligned && s.n >= 1 && s.k >= 256 &&
                    s.k % 256 == 0 && caps.compute_major >= 8 && caps.sm_count >= 1;
  if (!fits) return choice;

  const QuantMmaFormat f = quant_mma_format(s.quant);
  const int64_t ksb = s.k / 256, tiles = ceil_div(s.n, 16), slots = caps.sm_count;
  const size_t limit = quant_mma_smem_limit(caps);
  const int64_t max_slices = std::min<int64_t>({ksb, slots, kQuantMmaMaxSlices});
  double best = std::numeric_limits<double>::infinity();
  for (int64_t p = 1; p <= max_slices; ++p) {
    const int64_t ss = ceil_div(ksb, p);
    if (ceil_div(ksb, ss) != p) continue;  // the same slices as a smaller p
    if (p > 1 && (!split_k || p * s.m * s.n * 4 > kQuantMmaMaxPartialBytes)) continue;
    const QuantMmaLayout layout = quant_mma_layout(s.quant, s.m, ss);
    if (layout.bytes > limit) continue;
    const int64_t tg = ceil_div(tiles, slots / p), groups = ceil_div(tiles, tg);
    if (groups > kQuantMmaMaxRowGroups) continue;
    // Bytes from L2 per CTA: x's slice, and with a split the partial sums written and merged.
    const double l2 = static_cast<double>(s.m * ss * 512) +
                      (p > 1 ? 2.0 * static_cast<double>(s.m * tg * 16 * 4) : 0.0);
    for (int wk : {8, 4, 2, 1}) {
      const int wr = kQuantMmaWarps / wk;
      const int64_t sw = ceil_div(ss, wk);
      if (wk > 1 && sw * (wk - 1) >= ss) continue;  // the slice leaves a warp without work
      const int64_t rounds = ceil_div(tg, wr);
      const double weight = static_cast<double>(rounds * sw * 16 * f.sb_bytes);
      const double cost = weight + kL2Weight * l2 / kQuantMmaWarps +
                          kRoundCost * static_cast<double>(rounds) + (p > 1 ? kSplitCost : 0.0);
      if (cost < best) {
        best = cost;
        choice.kernel = LinearBlocksKernel::mma;
        choice.plan = QuantMmaPlan{static_cast<int>(p),  static_cast<int>(ss),     wk,          wr,
                                   static_cast<int>(tg), static_cast<int>(groups), layout.bytes};
      }
    }
  }
  return choice;
}

}  // namespace dspark::cuda
