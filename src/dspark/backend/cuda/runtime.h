// The CUDA runtime seen from host code: device queries and RAII owners of streams and events.
// This header has no CUDA includes: handles are opaque pointers. In a build without CUDA every
// function that needs a GPU throws ErrorKind::unsupported "built without CUDA"
// (runtime_stub.cpp); built_with_cuda() and device_count() answer false / 0.
#pragma once

#include <cstddef>
#include <string>

namespace dspark::cuda {

bool built_with_cuda();
int device_count();  // 0 when built without CUDA or when no device is visible
// Throws unsupported with a clear message if `index` cannot be used.
void require_device(int index);
void set_device(int index);
std::string device_name(int index);
// Measured properties the kernels and benchmarks need.
struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int major = 0, minor = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
};
DeviceInfo device_info(int index);
// Free and total bytes of device `index`'s memory now (cudaMemGetInfo).
struct MemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
MemoryInfo memory_info(int index);

void* malloc_device(size_t bytes);
void free_device(void* ptr) noexcept;
void* malloc_host_pinned(size_t bytes);
void free_host_pinned(void* ptr) noexcept;
void memcpy_sync(void* dst, const void* src, size_t bytes);  // any direction (unified addressing)
void memset_sync(void* dst, int value, size_t bytes);
void device_synchronize();
// Host threads that wait for the device (stream / event synchronisation) sleep instead of
// spinning (cudaDeviceScheduleBlockingSync), so that their CPU time is the host's own work. Call
// before anything else uses `device` (throws device when it is already initialised differently).
void set_blocking_sync(int device);
// Device-to-device copy bandwidth in bytes/s counting bytes read + written (median of several
// copies of `bytes`), the roofline reference of the benchmarks.
double measure_copy_bandwidth(int device, size_t bytes = size_t{1} << 30);

// A blocking stream (it synchronises with the legacy default stream): the synchronous helpers of
// core/buffer.h (copy_of, to_vector, copy_tensor) therefore see all work enqueued before them.
class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void* handle() const { return handle_; }  // cudaStream_t
  int device() const { return device_; }
  void synchronize() const;
  void memcpy_async(void* dst, const void* src, size_t bytes) const;
  void memset_async(void* dst, int value, size_t bytes) const;

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded, this one completed).
  float elapsed_ms_since(const Event& start) const;
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

}  // namespace dspark::cuda
