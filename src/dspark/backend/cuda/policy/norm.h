// How add_rms_norm runs on CUDA (kernels/norm.cu; also linear_add_rms_norm's split sums): a pure
// function of the call's shape and launch, and the context's caps and tuning. Host-only.
#pragma once

#include <cstdint>

#include "dspark/backend/cuda/policy/device.h"

namespace dspark::cuda {

// The most threads per row of the one-pass kernel (a row of up to 4 vectors per thread stays in
// registers).
inline constexpr int kNormRowThreads = 256;
// Rows of a call whose rows may be shared by a cluster of CTAs.
inline constexpr int64_t kNormClusterMaxRows = 64;

struct NormPlan {
  int vectors_per_thread = 0;  // the one-pass kernel (1 to 4); 0: the two-pass kernel
  int cluster_ctas = 1;        // > 1: that many CTAs per row (one vector per thread)
};

// A call of `rows` rows of `vectors` 16-byte vectors each (`vectorized`: the rows are aligned and
// the residual and x vectors have one width). `f32_rows`: residual and x are f32 (the clustered
// kernel's only types). `programmatic`: the launch is a programmatic dependent of the kernel
// before it (not right after a cuBLASLt GEMM): clusters only with t.norm_cluster_programmatic.
// No clusters with t.batch_invariant (a row's sum of squares then has one order at any M).
NormPlan choose_add_rms_norm(int64_t rows, int64_t vectors, bool vectorized, bool f32_rows,
                             bool programmatic, const DeviceCaps& caps, const Tuning& t);

}  // namespace dspark::cuda
