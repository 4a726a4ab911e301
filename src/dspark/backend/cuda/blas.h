// RAII owner of a cuBLASLt handle and its workspace, bound to one stream. No CUDA includes.
#pragma once

#include <cstddef>

namespace dspark::cuda {

class Stream;

class BlasLt {
 public:
  explicit BlasLt(const Stream& stream, size_t workspace_bytes = size_t{32} << 20);
  ~BlasLt();
  BlasLt(BlasLt&& other) noexcept;
  BlasLt& operator=(BlasLt&& other) noexcept;
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;

  void* handle() const { return handle_; }  // cublasLtHandle_t
  void* stream() const { return stream_; }  // cudaStream_t
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  void* handle_ = nullptr;
  void* stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace dspark::cuda
