#include "dspark/backend/cuda/blas.h"

#include "dspark/backend/cuda/check.h"
#include "dspark/backend/cuda/runtime.h"

namespace dspark::cuda {

BlasLt::BlasLt(const Stream& stream, size_t workspace_bytes)
    : stream_(stream.handle()), workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  DSPARK_CUBLAS_CHECK(cublasLtCreate(&h));
  handle_ = h;
  if (workspace_bytes_ > 0) DSPARK_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

BlasLt::~BlasLt() {
  if (workspace_) (void)cudaFree(workspace_);
  if (handle_) (void)cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

BlasLt::BlasLt(BlasLt&& other) noexcept
    : handle_(other.handle_),
      stream_(other.stream_),
      workspace_(other.workspace_),
      workspace_bytes_(other.workspace_bytes_) {
  other.handle_ = nullptr;
  other.workspace_ = nullptr;
}

BlasLt& BlasLt::operator=(BlasLt&& other) noexcept {
  if (this != &other) {
    this->~BlasLt();
    handle_ = other.handle_;
    stream_ = other.stream_;
    workspace_ = other.workspace_;
    workspace_bytes_ = other.workspace_bytes_;
    other.handle_ = nullptr;
    other.workspace_ = nullptr;
  }
  return *this;
}

}  // namespace dspark::cuda
