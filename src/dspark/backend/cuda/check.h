// CUDA / cuBLAS error checks, reporting through the one dspark reporter (core/error.h).
// Private to the CUDA backend: includes the CUDA headers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "dspark/core/error.h"

namespace dspark::cuda::detail {
[[noreturn]] void fail_cuda(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void fail_cublas(cublasStatus_t status, const char* expr, const char* file, int line);
}  // namespace dspark::cuda::detail

#define DSPARK_CUDA_CHECK(expr)                                                      \
  do {                                                                               \
    const cudaError_t dspark_err_ = (expr);                                          \
    if (dspark_err_ != cudaSuccess) [[unlikely]]                                     \
      ::dspark::cuda::detail::fail_cuda(dspark_err_, #expr, __FILE__, __LINE__);     \
  } while (0)

#define DSPARK_CUBLAS_CHECK(expr)                                                    \
  do {                                                                               \
    const cublasStatus_t dspark_st_ = (expr);                                        \
    if (dspark_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                            \
      ::dspark::cuda::detail::fail_cublas(dspark_st_, #expr, __FILE__, __LINE__);    \
  } while (0)

// After every kernel launch: catches bad launch configurations immediately.
#define DSPARK_CUDA_CHECK_LAUNCH() DSPARK_CUDA_CHECK(cudaGetLastError())
