#include "dspark/core/buffer.h"

#include <array>
#include <atomic>
#include <cstring>

#include "dspark/core/device_memory.h"

namespace dspark {
namespace {

constexpr int kMaxCudaDevices = 16;

struct Counters {
  std::atomic<int64_t> active{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
};

Counters& counters(Device device) {
  static std::array<Counters, kMaxCudaDevices + 1> all;
  const int slot = device.is_cpu() ? 0 : 1 + device.index;
  DSPARK_CHECK(slot >= 0 && slot <= kMaxCudaDevices, "device index {} out of range", device.index);
  return all[slot];
}

void count_allocation(Device device, int64_t bytes) {
  Counters& c = counters(device);
  const int64_t now = c.active.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.allocations.fetch_add(1);
}

}  // namespace

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return MemoryStats{c.active.load(), c.peak.load(), c.allocations.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.active.load());
}

Buffer::Buffer(Device device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  data_ = device_allocate(device, bytes);
  count_allocation(device, static_cast<int64_t>(bytes));
}

Buffer Buffer::zeros(Device device, size_t bytes) {
  if (!device.is_cpu() || bytes < kHostMapMinBytes) {
    Buffer b(device, bytes);
    if (bytes > 0) device_memset(b.data_, device, 0, bytes);
    return b;
  }
  Buffer b;
  b.data_ = host_map_zeroed(bytes);
  b.bytes_ = bytes;
  b.device_ = device;
  b.mapped_ = true;
  count_allocation(device, static_cast<int64_t>(bytes));
  return b;
}

Buffer::~Buffer() {
  reset();
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_), mapped_(other.mapped_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
  other.mapped_ = false;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    mapped_ = other.mapped_;
    other.data_ = nullptr;
    other.bytes_ = 0;
    other.mapped_ = false;
  }
  return *this;
}

void Buffer::reset() noexcept {
  if (data_) {
    if (mapped_) {
      host_unmap(data_, bytes_);
    } else {
      device_free(device_, data_);
    }
    counters(device_).active.fetch_sub(static_cast<int64_t>(bytes_));
  }
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = false;
}

OwnedTensor::OwnedTensor(DType dtype, Shape shape, Device device)
    : buffer_(device, static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
      view_(buffer_.data(), dtype, shape, device) {}

OwnedTensor OwnedTensor::zeros(DType dtype, Shape shape, Device device) {
  OwnedTensor t;
  t.buffer_ = Buffer::zeros(device, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  t.view_ = Tensor(t.buffer_.data(), dtype, shape, device);
  return t;
}

namespace {
// Gathers a strided tensor on the host into contiguous `out` (element-wise, any rank).
void gather_strided_host(const Tensor& src, char* out) {
  const size_t es = src.element_size();
  const int rank = src.dim();
  const int64_t n = src.numel();
  std::array<int64_t, kMaxDims> idx{};
  const char* base = static_cast<const char*>(src.data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += idx[d] * src.stride(d);
    std::memcpy(out + i * es, base + off * static_cast<int64_t>(es), es);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < src.size(d)) break;
      idx[d] = 0;
    }
  }
}
}  // namespace

OwnedTensor OwnedTensor::copy_of(const Tensor& src, Device device) {
  OwnedTensor dst(src.dtype(), src.shape(), device);
  if (src.numel() == 0) return dst;
  if (src.is_contiguous()) {
    device_copy(dst.view().data(), device, src.data(), src.device(), src.nbytes());
    return dst;
  }
  // Non-contiguous: bring the covering bytes to the host, gather there, then copy to `device`.
  if (src.device().is_cpu()) {
    if (device.is_cpu()) {
      gather_strided_host(src, static_cast<char*>(dst.view().data()));
    } else {
      OwnedTensor host(src.dtype(), src.shape(), Device::cpu());
      gather_strided_host(src, static_cast<char*>(host.view().data()));
      device_copy(dst.view().data(), device, host.view().data(), Device::cpu(), src.nbytes());
    }
    return dst;
  }
  int64_t span = 1;  // elements from data() to the last element, inclusive
  for (int d = 0; d < src.dim(); ++d) span += (src.size(d) - 1) * src.stride(d);
  for (int d = 0; d < src.dim(); ++d)
    DSPARK_CHECK(src.stride(d) >= 0, "copy_of: negative strides are not supported");
  OwnedTensor raw(src.dtype(), Shape{span}, Device::cpu());
  device_copy(raw.view().data(), Device::cpu(), src.data(), src.device(),
              static_cast<size_t>(span) * src.element_size());
  Tensor host_view(raw.view().data(), src.dtype(), src.shape(), src.strides(), Device::cpu());
  return copy_of(host_view, device);
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  DSPARK_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy_tensor: {} from {}",
               dst.describe(), src.describe());
  DSPARK_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy_tensor: needs contiguous tensors");
  if (src.numel() == 0) return;
  device_copy(dst.data(), dst.device(), src.data(), src.device(), src.nbytes());
}

std::vector<float> to_f32_vector(const Tensor& t) {
  OwnedTensor host = OwnedTensor::copy_of(t, Device::cpu());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype(), [&]<typename T>(TypeTag<T>) {
    const T* p = static_cast<const T*>(host.view().data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_f32(p[i]);
  });
  return out;
}

}  // namespace dspark
