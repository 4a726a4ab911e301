// Context: where an op runs. On the CPU it carries the thread pool; on CUDA it owns the stream the
// ops enqueue on, the cuBLASLt handle, a grow-only scratch buffer, and what the CUDA kernel choices
// read besides the call (the device's capabilities and this context's tuning values:
// backend/cuda/policy/). Ops take `Context&` first. A Context is used by one thread at a time.
#pragma once

#include <memory>

#include "dspark/core/buffer.h"
#include "dspark/core/device.h"

namespace dspark {

class ThreadPool;
namespace cuda {
class Stream;
class BlasLt;
struct DeviceCaps;
struct Tuning;
}  // namespace cuda

class Context {
 public:
  // Throws unsupported ("built without CUDA" / "no CUDA device") when `device` cannot be used.
  explicit Context(Device device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  ThreadPool& pool() const;
  cuda::Stream& stream() const;  // CUDA only
  void* cuda_stream() const;     // cudaStream_t, or null on the CPU
  cuda::BlasLt& blas() const;    // CUDA only
  // The device's capabilities (queried once; zeros on the CPU) and the tuning values of this
  // context's CUDA kernel choices (backend/cuda/policy/device.h: the defaults there; a test may
  // change them to reach the paths other devices or shapes take).
  const cuda::DeviceCaps& cuda_caps() const { return *caps_; }
  cuda::Tuning& cuda_tuning() { return *tuning_; }
  const cuda::Tuning& cuda_tuning() const { return *tuning_; }
  // Waits for all work enqueued on this context.
  void synchronize() const;
  // Wall milliseconds spent inside synchronize() on this context so far (CUDA; 0 on the CPU, where
  // it returns at once): what a caller subtracts from its thread's CPU time to get its host work
  // outside the waits when the waits spin (SpecTelemetry::sync_wait_ms).
  double synchronize_wall_ms() const { return sync_wall_ms_; }
  // Device memory of at least `bytes`, valid until the next scratch() call; grows, never shrinks.
  // While capturing (below) it refuses to grow: growing synchronises and frees the old buffer.
  void* scratch(size_t bytes);
  // The current scratch buffer (null before the first scratch() call) and its size. A CUDA graph
  // that captured scratch() stays valid while this pointer does not change.
  const void* scratch_data() const { return scratch_.data(); }
  size_t scratch_capacity() const { return scratch_.bytes(); }
  // Set while a CUDA graph is being captured on this context's stream (backend/graph_set.h).
  void set_capturing(bool capturing) { capturing_ = capturing; }
  bool capturing() const { return capturing_; }
  // Asynchronous copy on this context's stream (plain memcpy on the CPU).
  void copy_async(void* dst, const void* src, size_t bytes) const;

 private:
  Device device_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<cuda::Stream> stream_;
  std::unique_ptr<cuda::BlasLt> blas_;
  std::unique_ptr<const cuda::DeviceCaps> caps_;
  std::unique_ptr<cuda::Tuning> tuning_;
  Buffer scratch_;
  bool capturing_ = false;
  mutable double sync_wall_ms_ = 0;
};

}  // namespace dspark
