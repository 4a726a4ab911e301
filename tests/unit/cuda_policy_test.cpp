// The CUDA kernel choices (backend/cuda/policy/): pure functions of the call's shape and dtypes,
// the device's caps and the context's tuning, checked here on the CPU at the shapes that matter
// (the Qwen3-8B decode, verify and draft shapes on an H200: sm_90, 132 SMs; the quantized linear
// at the Llama-3.1-8B shapes) and at the edges of every kernel's limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/attention.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/backend/cuda/policy/linear.h"
#include "dspark/backend/cuda/policy/linear_fp8.h"
#include "dspark/backend/cuda/policy/linear_quant.h"
#include "dspark/backend/cuda/policy/norm.h"

namespace dspark::cuda {
namespace {

constexpr DeviceCaps kH200{9, 132};
constexpr DeviceCaps kAmpere{8, 108};

LinearShape bf16_linear(int64_t m, int64_t n, int64_t k) {
  return LinearShape{m, n, k, DType::bf16, DType::bf16, DType::bf16, true};
}

TEST(CudaPolicyLinear, OneRowKernelForDecodeProjections) {
  const Tuning t;
  // Qwen3-8B: fused q/k/v (6,144 x 4,096) and o (4,096 x 4,096) in 8-warp CTAs, gate/up
  // (24,576 x 4,096) and down (4,096 x 12,288) in 16-warp CTAs, the LM head on cuBLASLt.
  EXPECT_EQ(choose_linear(bf16_linear(1, 6144, 4096), t), LinearKernel::one_row_half);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 4096), t), LinearKernel::one_row_half);
  EXPECT_EQ(choose_linear(bf16_linear(1, 24576, 4096), t), LinearKernel::one_row);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 12288), t), LinearKernel::one_row);
  EXPECT_EQ(choose_linear(bf16_linear(1, 151936, 4096), t), LinearKernel::cublaslt);
  // The edges: N <= 6,144 and K <= 8,192 for 8 warps; K <= 16,384, N <= 65,536, K % 8 == 0.
  EXPECT_EQ(choose_linear(bf16_linear(1, 6145, 4096), t), LinearKernel::one_row);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 8192), t), LinearKernel::one_row_half);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 8200), t), LinearKernel::one_row);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 16384), t), LinearKernel::one_row);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 16392), t), LinearKernel::cublaslt);
  EXPECT_EQ(choose_linear(bf16_linear(1, 65536, 4096), t), LinearKernel::one_row);
  EXPECT_EQ(choose_linear(bf16_linear(1, 65537, 4096), t), LinearKernel::cublaslt);
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 4100), t), LinearKernel::cublaslt);
}

TEST(CudaPolicyLinear, CublasLtForEverythingElse) {
  const Tuning t;
  for (int64_t m : {2, 16, 17, 48, 512})
    EXPECT_EQ(choose_linear(bf16_linear(m, 4096, 4096), t), LinearKernel::cublaslt) << m;
  LinearShape s = bf16_linear(1, 4096, 4096);
  s.aligned = false;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s = bf16_linear(1, 4096, 4096);
  s.x = s.w = s.y = DType::f32;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s = bf16_linear(1, 4096, 4096);
  s.w = DType::f16;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s = bf16_linear(1, 4096, 4096);
  s.y = DType::f16;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s.x = s.w = DType::f16;  // f16 in, f16 or f32 out
  EXPECT_EQ(choose_linear(s, t), LinearKernel::one_row_half);
  s.y = DType::f32;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::one_row_half);
}

TEST(CudaPolicyLinear, HalfCtasFollowTheTuning) {
  Tuning t;
  t.one_row_half_ctas_max_n = 0;
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 4096), t), LinearKernel::one_row);
  t.one_row_half_ctas_max_n = int64_t{1} << 20;
  EXPECT_EQ(choose_linear(bf16_linear(1, 24576, 4096), t), LinearKernel::one_row_half);
  EXPECT_EQ(choose_linear(bf16_linear(1, 24576, 12288), t), LinearKernel::one_row);
}

TEST(CudaPolicyLinear, LinearNormSplitsForVerifyRows) {
  const Tuning t;
  constexpr int64_t kPartial = int64_t{16} << 20;  // half the 32 MiB cuBLASLt workspace
  // The o (4,096 x 4,096) and down (4,096 x 12,288) projections of a verify of 16 drafts.
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4096), true, true, kPartial, t), 2);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 12288), true, true, kPartial, t), 2);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(2, 4096, 4096), true, true, kPartial, t), 2);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(48, 4096, 4096), true, true, kPartial, t), 2);
  // Decode rows, more than 48 rows, a norm that does not take the rows, w not contiguous.
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(1, 4096, 4096), true, true, kPartial, t), 0);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(49, 4096, 4096), true, true, kPartial, t), 0);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4096), true, false, kPartial, t), 0);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4096), false, true, kPartial, t), 0);
  // K a multiple of 8 x splits, N of 4; the partial sums must fit.
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4104), true, true, kPartial, t), 0);
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4098, 4096), true, true, kPartial, t), 0);
  EXPECT_EQ(
      choose_linear_norm_splits(bf16_linear(17, 4096, 4096), true, true, 17 * 4096 * 8 - 1, t), 0);
  LinearShape f32 = bf16_linear(17, 4096, 4096);
  f32.x = f32.w = DType::f32;
  EXPECT_EQ(choose_linear_norm_splits(f32, true, true, kPartial, t), 0);
}

TEST(CudaPolicyLinear, LinearNormSplitsFollowTheTuning) {
  Tuning t;
  constexpr int64_t kPartial = int64_t{16} << 20;
  t.linear_norm_splits = 0;
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4096), true, true, kPartial, t), 0);
  t.linear_norm_splits = 3;
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4104), true, true, kPartial, t), 3);
  t.linear_norm_splits = 9;  // the kernel's most
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4096), true, true, kPartial, t),
            kLinearNormMaxSplits);
  t.linear_norm_splits = 2;
  t.linear_norm_max_rows = 16;
  EXPECT_EQ(choose_linear_norm_splits(bf16_linear(17, 4096, 4096), true, true, kPartial, t), 0);
}

TEST(CudaPolicyNorm, ClustersForFewF32RowsLaunchedPlainly) {
  const Tuning t;
  // A verify's 17 rows of 4,096 f32 (1,024 vectors of 4), after a cuBLASLt GEMM: 8 CTAs per row.
  NormPlan p = choose_add_rms_norm(17, 1024, true, true, false, kH200, t);
  EXPECT_EQ(p.vectors_per_thread, 4);
  EXPECT_EQ(p.cluster_ctas, 8);
  // As a programmatic dependent (decode), on other GPUs, past 64 rows, 16-bit rows: one CTA.
  EXPECT_EQ(choose_add_rms_norm(17, 1024, true, true, true, kH200, t).cluster_ctas, 1);
  EXPECT_EQ(choose_add_rms_norm(17, 1024, true, true, false, kAmpere, t).cluster_ctas, 1);
  EXPECT_EQ(choose_add_rms_norm(64, 1024, true, true, false, kH200, t).cluster_ctas, 8);
  EXPECT_EQ(choose_add_rms_norm(65, 1024, true, true, false, kH200, t).cluster_ctas, 1);
  p = choose_add_rms_norm(17, 512, true, false, false, kH200, t);
  EXPECT_EQ(p.cluster_ctas, 1);
  EXPECT_EQ(p.vectors_per_thread, 2);
}

TEST(CudaPolicyNorm, RowsInRegistersUpToFourVectorsPerThread) {
  const Tuning t;
  EXPECT_EQ(choose_add_rms_norm(1, 1, true, false, true, kH200, t).vectors_per_thread, 1);
  EXPECT_EQ(choose_add_rms_norm(1, 256, true, false, true, kH200, t).vectors_per_thread, 1);
  EXPECT_EQ(choose_add_rms_norm(1, 257, true, false, true, kH200, t).vectors_per_thread, 2);
  EXPECT_EQ(choose_add_rms_norm(1, 700, true, false, true, kH200, t).vectors_per_thread, 3);
  EXPECT_EQ(choose_add_rms_norm(1, 1024, true, false, true, kH200, t).vectors_per_thread, 4);
  EXPECT_EQ(choose_add_rms_norm(1, 1025, true, false, true, kH200, t).vectors_per_thread, 0);
  EXPECT_EQ(choose_add_rms_norm(1, 64, false, false, true, kH200, t).vectors_per_thread, 0);
}

TEST(CudaPolicyNorm, ClustersFollowTheTuning) {
  Tuning t;
  t.norm_cluster_ctas = 1;
  EXPECT_EQ(choose_add_rms_norm(17, 1024, true, true, false, kH200, t).cluster_ctas, 1);
  t.norm_cluster_ctas = 3;  // rounded down to a cluster size
  EXPECT_EQ(choose_add_rms_norm(17, 1024, true, true, false, kH200, t).cluster_ctas, 2);
  t.norm_cluster_ctas = 4;
  t.norm_cluster_programmatic = true;
  EXPECT_EQ(choose_add_rms_norm(17, 1024, true, true, true, kH200, t).cluster_ctas, 4);
}

// The Qwen3-8B attention (32 heads, 8 KV heads, head_dim 128), pages of 16 tokens.
AttentionShape qwen3_8b(int64_t tokens_per_row, int64_t rows, int64_t kv_len) {
  const int64_t pages = (kv_len + 15) / 16;
  return AttentionShape{tokens_per_row * rows, 32, 8, 128, rows, pages * rows, 16};
}

TEST(CudaPolicyAttention, TensorCoresForSixteenBitCachesOfSupportedHeadDims) {
  for (int64_t hd : {64, 128, 256}) {
    EXPECT_TRUE(attention_on_tensor_cores(DType::bf16, DType::bf16, hd, true)) << hd;
    EXPECT_TRUE(attention_on_tensor_cores(DType::f16, DType::f16, hd, true)) << hd;
  }
  EXPECT_FALSE(attention_on_tensor_cores(DType::bf16, DType::bf16, 96, true));
  EXPECT_FALSE(attention_on_tensor_cores(DType::f32, DType::f32, 128, true));
  EXPECT_FALSE(attention_on_tensor_cores(DType::bf16, DType::f16, 128, true));
  EXPECT_FALSE(attention_on_tensor_cores(DType::bf16, DType::bf16, 128, false));
  // MLA's latent: head_dim 576 only where the V pages are the K pages.
  EXPECT_TRUE(attention_on_tensor_cores(DType::bf16, DType::bf16, 576, true, true));
  EXPECT_TRUE(attention_on_tensor_cores(DType::f16, DType::f16, 576, true, true));
  EXPECT_FALSE(attention_on_tensor_cores(DType::bf16, DType::bf16, 576, true));
  EXPECT_FALSE(attention_on_tensor_cores(DType::bf16, DType::bf16, 576, false, true));
  EXPECT_FALSE(attention_on_tensor_cores(DType::f32, DType::f32, 576, true, true));
}

TEST(CudaPolicyAttention, DecodeSplitsKeysMergedInClustersOnHopper) {
  const Tuning t;
  // One request at context 1,024 (+ the new token: 1,025 keys, 65 pages): 8 CTAs of 4 rows;
  // a split per 64 keys (17) would fill the GPU best; on sm_90 a cluster of at most 16 split
  // CTAs merges them (17 tiles: one CTA takes two).
  const AttentionPlan p = plan_attention(qwen3_8b(1, 1, 1025), true, kH200, t);
  EXPECT_EQ(p.kernel, AttentionKernel::tensor_core);
  EXPECT_EQ(p.tiling.grid_x, 1);
  EXPECT_EQ(p.tiling.grid_y, 8);
  EXPECT_EQ(p.tiling.tile_rows, 4);
  EXPECT_EQ(p.n_splits, 16);
  EXPECT_EQ(p.merge, SplitMerge::cluster);
  EXPECT_EQ(attention_splits(qwen3_8b(1, 1, 1025), kH200, t), 16);
  // Fewer tiles than that: one split per tile, as without clusters.
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 900), true, kH200, t).n_splits, 15);
  // The CUDA-core kernel: the same count (a graph's key does not depend on the kernel), merged by
  // the last CTA.
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 1025), false, kH200, t).n_splits, 16);
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 1025), false, kH200, t).merge, SplitMerge::last_cta);
  // Without clusters (Ampere, or either tuning off): 17 splits merged by the last CTA.
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 1025), true, kAmpere, t).n_splits, 17);
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 1025), true, kAmpere, t).merge, SplitMerge::last_cta);
  Tuning no_decode_cluster;
  no_decode_cluster.attention_decode_cluster_splits = 0;
  const AttentionPlan q = plan_attention(qwen3_8b(1, 1, 1025), true, kH200, no_decode_cluster);
  EXPECT_EQ(q.n_splits, 17);
  EXPECT_EQ(q.merge, SplitMerge::last_cta);
  // Clusters while 16 splits leave a CTA at most 2 key tiles (up to 2,048 keys); longer rows keep
  // the CTA target's count (at most 32) and the last-CTA merge.
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 2048), true, kH200, t).n_splits, 16);
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 2048), true, kH200, t).merge, SplitMerge::cluster);
  for (int64_t kv_len : {2049, 4097, 16385}) {
    const AttentionPlan r = plan_attention(qwen3_8b(1, 1, kv_len), true, kH200, t);
    EXPECT_EQ(r.n_splits, 32) << kv_len;
    EXPECT_EQ(r.merge, SplitMerge::last_cta) << kv_len;
  }
  EXPECT_EQ(plan_attention(qwen3_8b(1, 1, 16385), true, kAmpere, t).merge, SplitMerge::last_cta);
}

TEST(CudaPolicyAttention, VerifySplitsMergedByClustersOnHopper) {
  const Tuning t;
  // A verify of 16 drafts (17 queries) at context 1,024: 5 x 8 CTAs of 16 rows; 7 splits for
  // 264 CTA slots, 6 with the same most key tiles per CTA (17 tiles: 3 each).
  const AttentionShape verify = qwen3_8b(17, 1, 1024 + 17);
  AttentionPlan p = plan_attention(verify, true, kH200, t);
  EXPECT_EQ(p.tiling.grid_x, 5);
  EXPECT_EQ(p.tiling.tile_rows, 16);
  EXPECT_EQ(p.n_splits, 6);
  EXPECT_EQ(p.merge, SplitMerge::cluster);
  // The CUDA-core kernel has no cluster merge: the same split count (a graph's key does not
  // depend on the kernel), merged by the combine kernel.
  p = plan_attention(verify, false, kH200, t);
  EXPECT_EQ(p.n_splits, 6);
  EXPECT_EQ(p.merge, SplitMerge::combine);
  // Without clusters (other GPUs, or the tuning): the CTA target's count and the combine kernel.
  p = plan_attention(verify, true, kAmpere, t);
  EXPECT_EQ(p.n_splits, 6);  // 216 slots / 40 CTAs
  EXPECT_EQ(p.merge, SplitMerge::combine);
  Tuning no_cluster;
  no_cluster.attention_cluster_merge = false;
  p = plan_attention(verify, true, kH200, no_cluster);
  EXPECT_EQ(p.n_splits, 7);
  EXPECT_EQ(p.merge, SplitMerge::combine);
  // At 16k context: 7 for the CTA slots (at most 8, a portable cluster); balancing 257 tiles keeps
  // 7 (37 per split). At 4k with merge rows 2, decode tiles are cluster-merged too: 33 -> 8.
  EXPECT_EQ(attention_splits(qwen3_8b(17, 1, 16384 + 17), kH200, t), 7);
  Tuning small_merge;
  small_merge.attention_merge_rows = 2;
  EXPECT_EQ(attention_splits(qwen3_8b(1, 1, 4097), kH200, small_merge), 8);
}

TEST(CudaPolicyAttention, MergeRowsFollowTheTuning) {
  Tuning t;
  t.attention_merge_rows = 0;  // decode tiles too go to clusters: at most 8, balanced
  AttentionPlan p = plan_attention(qwen3_8b(1, 1, 1025), true, kH200, t);
  EXPECT_EQ(p.n_splits, 6);  // 17 tiles over 8 splits: 3 each at most, so 6 splits
  EXPECT_EQ(p.merge, SplitMerge::cluster);
  t.attention_merge_rows = 16;  // every tile merged by its last CTA (without decode clusters)
  t.attention_decode_cluster_splits = 0;
  p = plan_attention(qwen3_8b(17, 1, 1041), true, kH200, t);
  EXPECT_EQ(p.n_splits, 7);
  EXPECT_EQ(p.merge, SplitMerge::last_cta);
}

// MLA's decode (16 query heads over one latent head: one 16-row tile per token) takes the decode
// clusters (16 splits at 1,025 keys); its verify keeps the balanced clusters of at most 8.
TEST(CudaPolicyAttention, MlaDecodeTilesTakeTheDecodeClusters) {
  const Tuning t;
  const AttentionShape decode{1, 16, 1, 576, 1, 65, 16};
  AttentionPlan p = plan_attention(decode, true, kH200, t);
  EXPECT_EQ(p.tiling.tile_rows, 16);
  EXPECT_EQ(p.n_splits, 16);
  EXPECT_EQ(p.merge, SplitMerge::cluster);
  const AttentionShape verify{17, 16, 1, 576, 1, 66, 16};
  p = plan_attention(verify, true, kH200, t);
  EXPECT_LE(p.n_splits, 8);
  EXPECT_EQ(p.merge, SplitMerge::cluster);
}

// Decode tiles of several tokens (Qwen3-8B's two rows: tiles of 2 tokens x 4 heads, 8 rows) are
// not decode tiles for the clusters: the decode clusters' count never exceeds the count without
// them (CudaAttention.DecodeClusterMergeEqualsLastCtaMerge compares such launches).
TEST(CudaPolicyAttention, TwoTokenDecodeTilesKeepTheBalancedClusters) {
  Tuning t;
  const AttentionShape two_rows{2, 32, 8, 128, 2, 44 + 57, 16};
  const AttentionPlan with = plan_attention(two_rows, true, kH200, t);
  t.attention_decode_cluster_splits = 0;
  const AttentionPlan without = plan_attention(two_rows, true, kH200, t);
  EXPECT_EQ(with.tiling.tile_rows, 8);
  EXPECT_EQ(with.n_splits, without.n_splits);
  EXPECT_LE(with.n_splits, 8);
}

TEST(CudaPolicyAttention, NoSplitsWhenTheTilesFillTheGpu) {
  const Tuning t;
  // 16 requests verifying 16 drafts: 272 tokens in tiles of 4, x 8 KV heads = 544 CTAs >= 264.
  const AttentionPlan p = plan_attention(qwen3_8b(17, 16, 1041), true, kH200, t);
  EXPECT_EQ(p.n_splits, 1);
  EXPECT_EQ(p.merge, SplitMerge::none);
  // A short context is not split into empty pieces: 2 pages, 32 keys, one 64-key tile.
  EXPECT_EQ(attention_splits(qwen3_8b(1, 1, 32), kH200, t), 1);
  EXPECT_EQ(attention_splits(AttentionShape{}, kH200, t), 1);
}

// --exact (Tuning::batch_invariant): every choice whose arithmetic would depend on the rows of the
// call takes the one that does not, at every M - decode, verify, many requests' rows, the LM head.
TEST(CudaPolicyBatchInvariant, OneKernelFamilyAtEveryRowCount) {
  Tuning t;
  t.batch_invariant = true;
  constexpr int64_t kPartial = int64_t{16} << 20;
  for (int64_t m : {1, 2, 17, 33, 48, 64, 65, 544, 4096}) {
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 12288}, {151936, 4096}, {4096, 16400}}) {
      EXPECT_EQ(choose_linear(bf16_linear(m, n, k), t), LinearKernel::invariant)
          << m << " x " << n << " x " << k;
    }
    EXPECT_EQ(choose_linear_norm_splits(bf16_linear(m, 4096, 4096), true, true, kPartial, t), 0);
    for (bool programmatic : {false, true})
      EXPECT_EQ(choose_add_rms_norm(m, 1024, true, true, programmatic, kH200, t).cluster_ctas, 1);
    EXPECT_EQ(choose_add_rms_norm(m, 1024, true, true, false, kH200, t).vectors_per_thread, 4);
    for (int64_t kv_len : {1, 1025, 16385})
      EXPECT_EQ(plan_attention(qwen3_8b(1, m, kv_len), true, kH200, t).n_splits, 1);
    EXPECT_EQ(plan_attention(qwen3_8b(17, 1, 1025), true, kH200, t).merge, SplitMerge::none);
  }
  // What the kernel cannot take stays on cuBLASLt (not invariant): K not a multiple of 16,
  // unaligned rows, f32 weights, mixed dtypes.
  EXPECT_EQ(choose_linear(bf16_linear(1, 4096, 4104), t), LinearKernel::cublaslt);
  LinearShape s = bf16_linear(17, 4096, 4096);
  s.aligned = false;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s = bf16_linear(17, 4096, 4096);
  s.x = s.w = s.y = DType::f32;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s = bf16_linear(1, 4096, 4096);
  s.w = DType::f16;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::cublaslt);
  s = bf16_linear(17, 4096, 4096);
  s.y = DType::f32;
  EXPECT_EQ(choose_linear(s, t), LinearKernel::invariant);
}

TEST(CudaPolicyLinearFp8, KernelByRowsAndShape) {
  // The drafter's projections on the H200 (264 CTA slots of the stream kernel).
  EXPECT_EQ(choose_linear_fp8(1, 4096, 4096, kH200), Fp8Kernel::registers);
  EXPECT_EQ(choose_linear_fp8(16, 12288, 4096, kH200), Fp8Kernel::registers);
  EXPECT_EQ(choose_linear_fp8(8, 4096, 12288, kH200), Fp8Kernel::stream4);
  EXPECT_EQ(choose_linear_fp8(16, 8448, 12288, kH200), Fp8Kernel::stream2_tiles2);
  EXPECT_EQ(choose_linear_fp8(16, 4224, 12288, kH200), Fp8Kernel::stream2);
  EXPECT_EQ(choose_linear_fp8(16, 6000, 12288, kH200), Fp8Kernel::tile);
  EXPECT_EQ(choose_linear_fp8(17, 4096, 4096, kH200), Fp8Kernel::tile);
  EXPECT_EQ(choose_linear_fp8(64, 4096, 4096, kH200), Fp8Kernel::tile);
  EXPECT_EQ(choose_linear_fp8(16, 4096, 4160, kH200), Fp8Kernel::stream2);
  // Block-scaled weights (a target's): never the x-in-registers kernel, whose split of K differs.
  EXPECT_EQ(choose_linear_fp8(1, 4096, 4096, kH200, true), Fp8Kernel::stream4);
  EXPECT_EQ(choose_linear_fp8(16, 12288, 4096, kH200, true), Fp8Kernel::stream2_tiles2);
  EXPECT_EQ(choose_linear_fp8(17, 4096, 4096, kH200, true), Fp8Kernel::tile);
}

LinearBlocksShape quant_linear(int64_t m, int64_t n, int64_t k, QuantType q = QuantType::q4_k,
                               DType x = DType::bf16) {
  return LinearBlocksShape{m, n, k, q, x, x, true};
}

// What every plan of the tensor-core kernel must hold: the grid covers every row tile and super-
// block once, fits the multiprocessors (one CTA each) and the shared memory, and no warp of a
// slice but the last's is left without super-blocks.
void expect_valid_plan(const LinearBlocksShape& s, const DeviceCaps& caps, const QuantMmaPlan& p) {
  const std::string what = std::string(quant_type_name(s.quant)) + " " + std::to_string(s.m) + "x" +
                           std::to_string(s.k) + " -> " + std::to_string(s.n);
  const int64_t ksb = s.k / 256, tiles = (s.n + 15) / 16;
  EXPECT_EQ(p.warps_k * p.warps_r, kQuantMmaWarps) << what;
  EXPECT_GE(int64_t{p.slices} * p.slice_sbs, ksb) << what;
  EXPECT_LT(int64_t{p.slices - 1} * p.slice_sbs, ksb) << what;
  EXPECT_GE(int64_t{p.row_groups} * p.tiles_per_cta, tiles) << what;
  EXPECT_LT(int64_t{p.row_groups - 1} * p.tiles_per_cta, tiles) << what;
  EXPECT_LE(int64_t{p.slices} * p.row_groups, caps.sm_count) << what;
  EXPECT_LE(p.row_groups, kQuantMmaMaxRowGroups) << what;
  EXPECT_LE(p.slices, kQuantMmaMaxSlices) << what;
  if (p.slices > 1) {
    EXPECT_LE(int64_t{p.slices} * s.m * s.n * 4, kQuantMmaMaxPartialBytes) << what;
  }
  const int64_t per_warp = (p.slice_sbs + p.warps_k - 1) / p.warps_k;
  EXPECT_TRUE(p.warps_k == 1 || per_warp * (p.warps_k - 1) < p.slice_sbs) << what;
  EXPECT_EQ(p.smem_bytes, quant_mma_layout(s.quant, s.m, p.slice_sbs).bytes) << what;
  EXPECT_LE(p.smem_bytes, quant_mma_smem_limit(caps)) << what;
}

// What every plan of the few-row kernel must hold: warps_k a power of two that divides the CTA's
// warps and leaves no warp of a row without super-blocks but the last's, tiles covering every row,
// the shared memory of m rows within the limit, and the same warps_k for every m (a row's sums in
// the same order).
void expect_valid_gemv_plan(const LinearBlocksShape& s, const DeviceCaps& caps,
                            const QuantGemvPlan& p) {
  const std::string what = std::string(quant_type_name(s.quant)) + " " + std::to_string(s.m) + "x" +
                           std::to_string(s.k) + " -> " + std::to_string(s.n);
  const int64_t ksb = s.k / 256;
  EXPECT_TRUE(p.warps_k >= 1 && p.warps_k <= kQuantGemvWarps && kQuantGemvWarps % p.warps_k == 0)
      << what;
  EXPECT_LE(p.warps_k, ksb) << what;
  const int64_t rows_per_tile = kQuantGemvWarps / p.warps_k;
  EXPECT_EQ(p.tiles, (s.n + rows_per_tile - 1) / rows_per_tile) << what;
  EXPECT_EQ(p.smem_bytes, quant_gemv_layout(s.quant, s.m, s.k).bytes) << what;
  EXPECT_LE(p.smem_bytes, quant_mma_smem_limit(caps)) << what;
  LinearBlocksShape one = s;
  one.m = 1;
  EXPECT_EQ(choose_linear_blocks(one, caps, Tuning{}).gemv_plan.warps_k, p.warps_k) << what;
}

TEST(CudaPolicyLinearBlocks, TensorCoresForDecodeAndVerifyRows) {
  const Tuning t;
  // Llama-3.1-8B: q/k/v 6,144 x 4,096, o 4,096 x 4,096, gate / up 14,336 x 4,096, down
  // 4,096 x 14,336, the LM head 128,256 x 4,096; decode, verify of 16 drafts, 48 rows.
  for (QuantType q : kQuantTypes) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{6144, 4096},
                               {4096, 4096},
                               {14336, 4096},
                               {4096, 14336},
                               {128256, 4096}}) {
      for (int64_t m : {1, 2, 8, 16, 17, 24, 32, 33, 48}) {
        for (DType x : {DType::bf16, DType::f16}) {
          const LinearBlocksShape s = quant_linear(m, n, k, q, x);
          const LinearBlocksChoice c = choose_linear_blocks(s, kH200, t);
          if (m <= kQuantGemvMaxRows) {
            ASSERT_EQ(c.kernel, LinearBlocksKernel::gemv)
                << quant_type_name(q) << " " << m << "x" << k;
            expect_valid_gemv_plan(s, kH200, c.gemv_plan);
            continue;
          }
          // The largest blocks (Q8_0, Q8_A, Q6_K) leave no room for every row of x beside the
          // 16 warps' rings at the widest calls: those take the dequantizing path.
          const bool wide =
              m > 24 && (q == QuantType::q8_0 || q == QuantType::q8_a || q == QuantType::q6_k);
          if (wide && c.kernel == LinearBlocksKernel::dequantize) continue;
          ASSERT_EQ(c.kernel, LinearBlocksKernel::mma)
              << quant_type_name(q) << " " << m << "x" << k;
          expect_valid_plan(s, kH200, c.plan);
        }
      }
    }
  }
  // The decode steps' o and down projections in Q4_K: a warp per row (256 tiles of 16 rows, two
  // rounds of 132 CTAs); k and v (1,024 rows) two warps per row, 128 tiles.
  QuantGemvPlan g = choose_linear_blocks(quant_linear(1, 4096, 4096), kH200, t).gemv_plan;
  EXPECT_EQ(g.warps_k, 1);
  EXPECT_EQ(g.tiles, 256);
  g = choose_linear_blocks(quant_linear(1, 4096, 14336), kH200, t).gemv_plan;
  EXPECT_EQ(g.warps_k, 1);
  g = choose_linear_blocks(quant_linear(1, 1024, 4096), kH200, t).gemv_plan;
  EXPECT_EQ(g.warps_k, 2);
  EXPECT_EQ(g.tiles, 128);
  // A deep K over few rows: every warp of a CTA on one row.
  EXPECT_EQ(choose_linear_blocks(quant_linear(1, 64, 14592), kH200, t).gemv_plan.warps_k, 16);
  // Five rows: the tensor cores, one slice, 128 CTAs of 2 row tiles.
  QuantMmaPlan p = choose_linear_blocks(quant_linear(5, 4096, 4096), kH200, t).plan;
  EXPECT_EQ(p.slices, 1);
  EXPECT_EQ(p.row_groups, 128);
  EXPECT_EQ(p.tiles_per_cta, 2);
  // A verify of 16 drafts: x's 17 rows of 4,096 do not fit beside the weight rings, so K is split
  // (4 slices of 1,024 for o, 8 of 1,792 for down).
  p = choose_linear_blocks(quant_linear(17, 4096, 4096), kH200, t).plan;
  EXPECT_EQ(p.slices, 4);
  EXPECT_EQ(p.slice_sbs, 4);
  p = choose_linear_blocks(quant_linear(17, 4096, 14336), kH200, t).plan;
  EXPECT_EQ(p.slices, 8);
  EXPECT_EQ(p.slice_sbs, 7);
}

TEST(CudaPolicyLinearBlocks, PairSplitBalancesBytesPerCta) {
  struct Case {
    int64_t tiles_a, bytes_a, tiles_b, bytes_b, total;
    int grid_a, grid_b;
    const char* what;
  };
  const Case cases[] = {
      // Llama-3.1-8B's decode q/k (Q4_K, 640 tiles of 8 rows of 2,304 bytes) and v (Q6_K, 128
      // tiles of 8 rows of 3,360 bytes) on 264 CTAs: 4 q/k tiles for each of 160 CTAs (73,728
      // bytes), at most 2 v tiles for each of the other 104; more CTAs for q/k leave the largest
      // share as it is.
      {640, 8 * 2304, 128, 8 * 3360, 264, 160, 104, "llama q/k + v"},
      {10, 1, 2, 10, 4, 2, 2, "ten light tiles, two heavy ones"},
      {3, 1, 2, 1, 100, 3, 2, "more CTAs than tiles: one per tile"},
      {7, 5, 9, 5, 1, 1, 1, "one CTA resident: still one per part"},
      {0, 5, 9, 5, 10, 0, 0, "no tiles on a side: no split"},
  };
  for (const Case& c : cases) {
    const QuantGemvPairSplit sp =
        gemv_pair_split(c.tiles_a, c.bytes_a, c.tiles_b, c.bytes_b, c.total);
    EXPECT_EQ(sp.grid_a, c.grid_a) << c.what;
    EXPECT_EQ(sp.grid_b, c.grid_b) << c.what;
  }
}

TEST(CudaPolicyLinearBlocks, PlansHoldOverShapes) {
  const Tuning t;
  for (const DeviceCaps& caps : {kH200, kAmpere, DeviceCaps{9, 1}, DeviceCaps{9, 7}}) {
    for (QuantType q : kQuantTypes) {
      for (int64_t n : {1, 15, 16, 17, 100, 1000, 5000}) {
        for (int64_t k : {256, 512, 768, 2816, 4096, 7936}) {
          for (int64_t m : {1, 5, 9, 17, 25, 40, 48}) {
            const LinearBlocksShape s = quant_linear(m, n, k, q);
            const LinearBlocksChoice c = choose_linear_blocks(s, caps, t);
            if (c.kernel == LinearBlocksKernel::mma) expect_valid_plan(s, caps, c.plan);
            if (c.kernel == LinearBlocksKernel::gemv) expect_valid_gemv_plan(s, caps, c.gemv_plan);
            // Without the K split's counters: one slice, or the dequantizing path.
            const LinearBlocksChoice one = choose_linear_blocks(s, caps, t, false);
            if (one.kernel == LinearBlocksKernel::mma) {
              EXPECT_EQ(one.plan.slices, 1);
              expect_valid_plan(s, caps, one.plan);
            }
          }
        }
      }
    }
  }
  // Few rows fit one slice on the H200, also without counters.
  EXPECT_EQ(choose_linear_blocks(quant_linear(5, 4096, 4096), kH200, t, false).plan.slices, 1);
  // 48 rows of x of 14,336 need a split: without counters, the dequantizing path.
  EXPECT_EQ(choose_linear_blocks(quant_linear(48, 4096, 14336), kH200, t, false).kernel,
            LinearBlocksKernel::dequantize);
  // The partial sums of a split stay within their budget: 48 rows of a 1M-row weight do not fit.
  EXPECT_EQ(choose_linear_blocks(quant_linear(48, 128256, 4096), kH200, t).kernel,
            LinearBlocksKernel::mma);
  EXPECT_EQ(choose_linear_blocks(quant_linear(48, 1 << 20, 4096), kH200, t).kernel,
            LinearBlocksKernel::dequantize);
}

// --exact: block weights take the few-row kernel at every M (chunks of kQuantGemvMaxRows rows),
// with one row's warps per row and tiles: a row's sums in the same order whatever the other rows.
TEST(CudaPolicyLinearBlocks, FewRowKernelAtEveryRowCountWhenBatchInvariant) {
  Tuning t;
  t.batch_invariant = true;
  for (int64_t m : {1, 4, 5, 17, 48, 49, 512})
    for (QuantType q : {QuantType::q4_k, QuantType::q4_1, QuantType::q6_k, QuantType::q8_0})
      for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 4096},
                                 {14336, 4096},
                                 {4096, 14336},
                                 {128256, 4096}}) {
        const LinearBlocksShape s = quant_linear(m, n, k, q);
        const LinearBlocksChoice c = choose_linear_blocks(s, kH200, t);
        ASSERT_EQ(c.kernel, LinearBlocksKernel::gemv) << m << " rows of " << quant_type_name(q);
        LinearBlocksShape chunk = s;
        chunk.m = std::min<int64_t>(m, kQuantGemvMaxRows);
        expect_valid_gemv_plan(chunk, kH200, c.gemv_plan);
        const QuantGemvPlan one =
            choose_linear_blocks(quant_linear(1, n, k, q), kH200, t).gemv_plan;
        EXPECT_EQ(c.gemv_plan.warps_k, one.warps_k) << m << " rows of " << quant_type_name(q);
        EXPECT_EQ(c.gemv_plan.tiles, one.tiles) << m << " rows of " << quant_type_name(q);
      }
  // Where the few-row kernel cannot take the shape, every M dequantizes (then the dense linear's
  // invariant kernel): K not a multiple of 256, unaligned operands.
  for (int64_t m : {1, 17}) {
    EXPECT_EQ(choose_linear_blocks(quant_linear(m, 4096, 4160), kH200, t).kernel,
              LinearBlocksKernel::dequantize);
    LinearBlocksShape s = quant_linear(m, 4096, 4096);
    s.aligned = false;
    EXPECT_EQ(choose_linear_blocks(s, kH200, t).kernel, LinearBlocksKernel::dequantize);
  }
}

TEST(CudaPolicyLinearBlocks, DequantizeEverythingElse) {
  const Tuning t;
  auto kernel = [&](const LinearBlocksShape& s) {
    return choose_linear_blocks(s, kH200, t).kernel;
  };
  EXPECT_EQ(kernel(quant_linear(4, 4096, 4096)), LinearBlocksKernel::gemv);
  EXPECT_EQ(kernel(quant_linear(5, 4096, 4096)), LinearBlocksKernel::mma);
  EXPECT_EQ(kernel(quant_linear(48, 4096, 4096)), LinearBlocksKernel::mma);
  EXPECT_EQ(kernel(quant_linear(49, 4096, 4096)), LinearBlocksKernel::dequantize);  // prefill
  EXPECT_EQ(kernel(quant_linear(512, 4096, 4096)), LinearBlocksKernel::dequantize);
  // f32 x: the few-row kernel rounds any x to int8; the tensor cores take 16-bit x only.
  EXPECT_EQ(kernel(quant_linear(1, 4096, 4096, QuantType::q8_0, DType::f32)),
            LinearBlocksKernel::gemv);
  EXPECT_EQ(kernel(quant_linear(5, 4096, 4096, QuantType::q8_0, DType::f32)),
            LinearBlocksKernel::dequantize);
  EXPECT_EQ(kernel(quant_linear(1, 4096, 4128, QuantType::q8_0)),  // K % 256 != 0
            LinearBlocksKernel::dequantize);
  EXPECT_EQ(kernel(quant_linear(1, 4096, 96, QuantType::q8_0)), LinearBlocksKernel::dequantize);
  LinearBlocksShape s = quant_linear(1, 4096, 4096);
  s.aligned = false;
  EXPECT_EQ(kernel(s), LinearBlocksKernel::dequantize);
  s = quant_linear(5, 4096, 4096);
  s.y = DType::f16;  // bf16 x, f16 y
  EXPECT_EQ(kernel(s), LinearBlocksKernel::dequantize);
  s.x = DType::f16;
  EXPECT_EQ(kernel(s), LinearBlocksKernel::mma);
  s.y = DType::f32;
  EXPECT_EQ(kernel(s), LinearBlocksKernel::mma);
  EXPECT_EQ(choose_linear_blocks(quant_linear(1, 4096, 4096), DeviceCaps{7, 80}, t).kernel,
            LinearBlocksKernel::dequantize);
  Tuning few;
  few.linear_blocks_max_rows = 16;
  EXPECT_EQ(choose_linear_blocks(quant_linear(16, 4096, 4096), kH200, few).kernel,
            LinearBlocksKernel::mma);
  EXPECT_EQ(choose_linear_blocks(quant_linear(17, 4096, 4096), kH200, few).kernel,
            LinearBlocksKernel::dequantize);
  few.linear_blocks_max_rows = 100;  // the kernel's limit stays 48
  EXPECT_EQ(choose_linear_blocks(quant_linear(49, 4096, 4096), kH200, few).kernel,
            LinearBlocksKernel::dequantize);
}

TEST(CudaPolicyLinearBlocks, SharedMemoryLayout) {
  for (QuantType q : kQuantTypes) {
    const QuantMmaFormat f = quant_mma_format(q);
    EXPECT_EQ(f.sb_bytes, 256 / quant_block(q).elements * quant_block(q).bytes);
    for (int64_t m : {1, 8, 9, 48}) {
      const QuantMmaLayout l = quant_mma_layout(q, m, 4);
      EXPECT_EQ(l.row_stride % 32, 16) << quant_type_name(q);  // an odd multiple of 16
      EXPECT_GE(l.row_stride, f.chunk_sbs * f.sb_bytes + 16) << quant_type_name(q);
      EXPECT_EQ(l.x_stride % 128, 32);
      EXPECT_EQ(l.table_stride % 2, 1);
      EXPECT_EQ(l.mp % 8, 0);
      EXPECT_GE(l.mp, m);
      for (size_t off : {l.table, l.part, l.x}) EXPECT_EQ(off % 16, 0u);
      EXPECT_EQ(l.bytes, l.x + static_cast<size_t>(m) * l.x_stride);
    }
  }
}

TEST(CudaPolicy, ContextsHoldTheirOwnTuning) {
  Context a(Device::cpu()), b(Device::cpu());
  EXPECT_EQ(a.cuda_caps().compute_major, 0);  // not queried on the CPU
  EXPECT_EQ(a.cuda_tuning().linear_norm_splits, Tuning{}.linear_norm_splits);
  a.cuda_tuning().linear_norm_splits = 0;
  EXPECT_EQ(b.cuda_tuning().linear_norm_splits, Tuning{}.linear_norm_splits);
}

}  // namespace
}  // namespace dspark::cuda
