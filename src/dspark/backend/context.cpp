#include "dspark/backend/context.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "dspark/backend/cuda/blas.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/elapsed.h"
#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"

namespace dspark {

namespace {

cuda::DeviceCaps caps_of(Device device) {
  cuda::DeviceCaps caps;
  if (device.is_cuda()) {
    const cuda::DeviceInfo info = cuda::device_info(device.index);
    caps.compute_major = info.major;
    caps.sm_count = info.sm_count;
    const char* mps = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    caps.all_sms = mps == nullptr || *mps == '\0' || std::atof(mps) >= 100.0;
  }
  return caps;
}

}  // namespace

Context::Context(Device device)
    : device_(device), pool_(&ThreadPool::global()), tuning_(std::make_unique<cuda::Tuning>()) {
  if (device.is_cuda()) {
    cuda::require_device(device.index);
    cuda::set_device(device.index);
    stream_ = std::make_unique<cuda::Stream>(device.index);
    blas_ = std::make_unique<cuda::BlasLt>(*stream_);
  }
  caps_ = std::make_unique<const cuda::DeviceCaps>(caps_of(device));
}

Context::~Context() = default;

ThreadPool& Context::pool() const {
  return *pool_;
}

cuda::Stream& Context::stream() const {
  DSPARK_CHECK(stream_ != nullptr, "Context on {} has no CUDA stream", device_.name());
  return *stream_;
}

void* Context::cuda_stream() const {
  return stream_ ? stream_->handle() : nullptr;
}

cuda::BlasLt& Context::blas() const {
  DSPARK_CHECK(blas_ != nullptr, "Context on {} has no cuBLASLt handle", device_.name());
  return *blas_;
}

void Context::synchronize() const {
  if (!stream_) return;
  const auto t0 = std::chrono::steady_clock::now();
  stream_->synchronize();
  sync_wall_ms_ += elapsed_ms(t0);
}

void* Context::scratch(size_t bytes) {
  if (scratch_.bytes() < bytes) {
    DSPARK_CHECK(!capturing_,
                 "Context::scratch: {} bytes requested while capturing a CUDA graph ({} held); "
                 "run the forward eagerly once first",
                 bytes, scratch_.bytes());
    synchronize();  // the old scratch may still be in use by enqueued work
    scratch_ = Buffer(device_, bytes + bytes / 2);
  }
  return scratch_.data();
}

void Context::copy_async(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  if (stream_) {
    stream_->memcpy_async(dst, src, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

}  // namespace dspark
