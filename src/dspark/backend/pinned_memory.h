// Page-locked host memory and the fence that guards its reuse: how host code stages per-step data
// for asynchronous copies to the device (the metadata a CUDA graph reads, readbacks). Backend-
// neutral declarations; CUDA implementations in backend/cuda/pinned_memory.cpp. In a build
// without CUDA, allocating pinned memory and recording a fence throw ErrorKind::unsupported.
#pragma once

#include <cstddef>

#include "dspark/backend/context.h"

namespace dspark {

// Page-locked host memory: copies from it with Context::copy_async are truly asynchronous (the
// caller must not rewrite it before the copy has run: see CopyFence).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// An event recorded after an asynchronous copy from pinned memory; wait() blocks the host until
// that copy has run (immediately when it already has, the usual case one step later).
class CopyFence {
 public:
  CopyFence() = default;
  ~CopyFence();
  CopyFence(CopyFence&& other) noexcept;
  CopyFence& operator=(CopyFence&& other) noexcept;
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;

  void record(const Context& ctx);
  void wait() const;

 private:
  void* event_ = nullptr;  // cudaEvent_t, created on first record()
};

}  // namespace dspark
