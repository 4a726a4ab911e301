// cuBLASLt plans of linear (kernels/matmul.cu): descriptors, layouts and algorithm of one GEMM
// shape, built once and cached process-wide. By default the algorithm is the heuristic's first
// candidate. With autotuning on (set_linear_autotune / DSPARK_LT_AUTOTUNE=N) a new plan times up
// to N of the heuristic's candidates on the call's own buffers, each call after an L2 flush (the
// weights come from HBM as in a decode step), and keeps the fastest; every autotuned plan is logged
// (linear_plan_log, and one line on stderr). DSPARK_LT_REDUCTION_MASK restricts the candidates'
// split-K reduction schemes (cublasLtReductionScheme_t bits; 0: no split-K reduction at all).
// CUDA-only, internal to backend/cuda.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>

#include "dspark/core/dtype.h"

namespace dspark::cuda {

// One GEMM shape. With batch > 1 it is a strided batch over K (linear's K split into partial
// sums, kernels/linear_norm.cu): batch b multiplies columns [b k, (b + 1) k) of w (row stride
// ld_w) and of x, and writes its own [m, n] block of D (row stride ld_y = n, blocks m n apart).
struct GemmKey {
  int device;
  int64_t m, n, k, ld_x, ld_y;
  int x_dtype, y_dtype;
  uint32_t align_x, align_w, align_y;
  int64_t ld_w = 0;  // 0: k
  int batch = 1;
  auto tie() const {
    return std::tie(device, m, n, k, ld_x, ld_y, x_dtype, y_dtype, align_x, align_w, align_y, ld_w,
                    batch);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

// Descriptors and algorithm of one GEMM shape; host objects, destroyed with the cache entry.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;

  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan();
};

// Runs the plan's GEMM once with `algo` on the call's buffers (asynchronously); false when
// cuBLASLt refuses the algorithm. Used to time candidates.
using RunCandidate = std::function<bool(const GemmPlan& plan, const cublasLtMatmulAlgo_t& algo,
                                        size_t workspace_bytes)>;

// The operands of one GEMM of a plan's shape: D (y) = w . x in the layouts of its GemmKey.
struct LtOperands {
  cublasLtHandle_t handle;
  const void* w;
  const void* x;
  void* y;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
  bool capturing;  // a graph is being captured: a new plan is not autotuned
};

// Enqueues the GEMM with the cached plan of `key`, made (and autotuned when asked) on first use.
void run_gemm(const GemmKey& key, DType x_dtype, DType y_dtype, const LtOperands& o);

// Largest power of two (<= 256) dividing the address: cuBLASLt's MIN_ALIGNMENT preferences.
uint32_t pointer_alignment(const void* p);

// The cached plan of `key`, or null (the per-call fast path: no allocation).
std::shared_ptr<const GemmPlan> cached_plan(const GemmKey& key);
// Makes the plan of `key` and caches it. `stream` and `run` are only used to autotune it (never
// while a graph is being captured: `capturing`).
std::shared_ptr<const GemmPlan> create_plan(const GemmKey& key, cublasLtHandle_t handle,
                                            DType x_dtype, DType y_dtype, size_t workspace_bytes,
                                            cudaStream_t stream, bool capturing,
                                            const RunCandidate& run);

}  // namespace dspark::cuda
