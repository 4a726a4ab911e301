// What a CUDA kernel choice depends on besides the call itself: the device's capabilities (queried
// once per Context) and the tuning values. A Context holds its own Tuning, default-constructed
// from the values below; tests change their context's copy to reach the paths that other devices
// or other shapes take. Host-only, no CUDA includes: built in every build, so the choices are
// unit-tested on the CPU (tests/unit/cuda_policy_test.cpp).
#pragma once

#include <cstdint>

namespace dspark::cuda {

struct DeviceCaps {
  int compute_major = 0;  // 9 on Hopper: sm_90a code (thread-block clusters)
  int sm_count = 0;
  // Whether this process may have a CTA resident on every multiprocessor at once (false under MPS
  // with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE below 100): a grid barrier needs that.
  bool all_sms = true;
};

struct Tuning {
  // Batch-invariant numerics (the `--exact` option): a row's bits depend only on its own token,
  // position and context, never on how many rows the forward has or where the row sits, so a
  // verify row equals the decode step of the same token bit for bit. Every 16-bit linear runs the
  // batch-invariant kernel (kernels/gemv_invariant.cu) at every M, no linear is fused with the
  // norm after it by a split of K, norms never share a row over a cluster, attention never
  // splits the keys, FP8 weights take the kernels whose sums do not depend on M, and
  // block-quantized weights their few-row kernel at every M (choose_linear_blocks).
  bool batch_invariant = false;
  // linear with one row on CUDA cores: CTAs of 8 warps, two per multiprocessor, for N <= this
  // (and K <= 8,192), else CTAs of 16 warps. An 8-warp CTA fits beside another kernel's CTA (a
  // decode attention's), so its first weight loads overlap that kernel; 6,144 covers the q/k/v
  // and o projections of the 8B shapes (graphed Qwen3-8B decode step on the H200: 4.552 ->
  // 4.495 ms).
  int64_t one_row_half_ctas_max_n = 6144;
  // linear_add_rms_norm: for 2..linear_norm_max_rows rows, the GEMM split into this many slices
  // of K whose f32 partial sums the norm kernel adds (no split-K reduce kernel); 0 or 1: linear
  // then add_rms_norm.
  int linear_norm_splits = 2;
  int linear_norm_max_rows = 48;
  // add_rms_norm's one-pass kernel for at most 64 f32 rows launched plainly (after a cuBLASLt
  // GEMM) on sm_90: a thread-block cluster of this many CTAs (1, 2, 4 or 8) shares each row
  // (the 17 rows of a verify: ~4.1 -> ~2.8 us on the H200).
  int norm_cluster_ctas = 8;
  // Clusters for programmatic launches too (after one of our kernels). Off: as programmatic
  // dependents of the one-row kernels they slowed the graphed decode step (4.47 -> 5.21 ms).
  bool norm_cluster_programmatic = false;
  // paged_attention with split keys: query tiles of at most this many rows are merged by their
  // last split CTA (decode: one row per warp), bigger ones by a cluster or the combine kernel.
  int attention_merge_rows = 4;
  // paged_attention with split keys on sm_90: the tensor-core kernel's split CTAs of a tile form a
  // cluster and merge through distributed shared memory (false: the combine kernel, the path of
  // GPUs without clusters).
  bool attention_cluster_merge = true;
  // With the cluster merge, decode tiles (at most attention_merge_rows rows) too: their split CTAs,
  // at most this many (up to kAttentionMaxDecodeClusterSplits, a non-portable cluster size), form
  // a cluster instead of being merged by the last one to finish (no partial rows through L2, no
  // arrival counter), for rows short enough (policy/attention.h). 0 or 1: the last-CTA merge.
  int attention_decode_cluster_splits = 16;
  // linear with block-quantized weights (policy/linear_quant.h): the tensor-core kernel for up to
  // this many rows of x (at most 48), above it the weight dequantized into scratch and cuBLASLt.
  // Not measured yet: 48 is the kernel's limit (a verify of 16 drafts is 17 rows; prefill chunks
  // are hundreds).
  int64_t linear_blocks_max_rows = 48;
};

}  // namespace dspark::cuda
