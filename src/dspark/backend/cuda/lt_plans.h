// cuBLASLt plans of linear (kernels/matmul.cu, kernels/linear_norm.cu): descriptors, layouts and
// algorithm of one GEMM shape, built once and cached process-wide. The algorithm is the
// heuristic's first candidate. CUDA-only, internal to backend/cuda.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
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

// The operands of one GEMM of a plan's shape: D (y) = w . x in the layouts of its GemmKey.
struct LtOperands {
  cublasLtHandle_t handle;
  const void* w;
  const void* x;
  void* y;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
};

// Enqueues the GEMM with the cached plan of `key`, made on first use.
void run_gemm(const GemmKey& key, DType x_dtype, DType y_dtype, const LtOperands& o);

// Largest power of two (<= 256) dividing the address: cuBLASLt's MIN_ALIGNMENT preferences.
uint32_t pointer_alignment(const void* p);

}  // namespace dspark::cuda
