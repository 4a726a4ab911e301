// Owning memory: Buffer (RAII bytes on one device, counted in per-device active/peak counters) and
// OwnedTensor (a Buffer with the contiguous Tensor view over it). Both are move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dspark/core/tensor.h"

namespace dspark {

struct MemoryStats {
  int64_t active_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t n_allocations = 0;  // allocations ever made
};
MemoryStats memory_stats(Device device);
// Resets the peak to the current active bytes (for measuring one phase).
void reset_peak_memory(Device device);

class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  // Zero-filled; large host buffers are mapped lazily (device_memory.h: host_map_zeroed).
  static Buffer zeros(Device device, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  void reset() noexcept;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
  bool mapped_ = false;  // from host_map_zeroed
};

class OwnedTensor {
 public:
  OwnedTensor() = default;
  // Uninitialised contiguous storage.
  OwnedTensor(DType dtype, Shape shape, Device device);

  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }  // NOLINT: a tensor owner is usable as a view
  const Tensor* operator->() const { return &view_; }
  Device device() const { return view_.device(); }

  static OwnedTensor zeros(DType dtype, Shape shape, Device device);
  // A contiguous copy of `src` (any device) on `device`.
  static OwnedTensor copy_of(const Tensor& src, Device device);
  template <typename T>
  static OwnedTensor from_vector(std::span<const T> values, Shape shape, Device device) {
    DSPARK_CHECK(shape.numel() == static_cast<int64_t>(values.size()),
                 "from_vector: {} values for shape {}", values.size(), shape.str());
    Tensor host(const_cast<T*>(values.data()), dtype_of<T>(), shape, Device::cpu());
    return copy_of(host, device);
  }
  template <typename T>
  static OwnedTensor from_vector(const std::vector<T>& values, Shape shape, Device device) {
    return from_vector(std::span<const T>(values), shape, device);
  }

 private:
  Buffer buffer_;
  Tensor view_;
};

// Copies a contiguous tensor into another of the same dtype and numel (any devices; synchronous).
void copy_tensor(const Tensor& dst, const Tensor& src);
// Reads any tensor (contiguous or not, any device) into a host vector of T (must match dtype).
template <typename T>
std::vector<T> to_vector(const Tensor& t) {
  DSPARK_CHECK(t.dtype() == dtype_of<T>(), "to_vector: tensor is {}", t.describe());
  OwnedTensor host = OwnedTensor::copy_of(t, Device::cpu());
  const T* p = static_cast<const T*>(host.view().data());
  return std::vector<T>(p, p + t.numel());
}
// Reads a float tensor of any float dtype into host f32.
std::vector<float> to_f32_vector(const Tensor& t);

}  // namespace dspark
