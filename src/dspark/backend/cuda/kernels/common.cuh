// Host-side helpers shared by the CUDA launchers (kernels/*.cu): the dspark -> CUDA element type
// map, row views of tensors, the context's stream, and uploads of small host arrays through the
// context's scratch buffer. Private to backend/cuda/kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/check.h"
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/core/dtype.h"
#include "dspark/core/tensor.h"

namespace dspark::cuda {

// dspark's host storage types have the same bits as CUDA's: kernels reinterpret the pointers.
template <typename T>
struct DeviceTypeOf {
  using type = T;
};
template <>
struct DeviceTypeOf<bf16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceTypeOf<f16> {
  using type = __half;
};
template <typename T>
using device_t = typename DeviceTypeOf<T>::type;
static_assert(sizeof(bf16) == sizeof(__nv_bfloat16) && sizeof(f16) == sizeof(__half));

template <typename T>
device_t<T>* device_ptr(const Tensor& t) {
  return static_cast<device_t<T>*>(t.data());
}

inline cudaStream_t stream_of(const Context& ctx) {
  return static_cast<cudaStream_t>(ctx.cuda_stream());
}

inline device::FloatKind float_kind(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return device::FloatKind::f32;
    case DType::bf16:
      return device::FloatKind::bf16;
    case DType::f16:
      return device::FloatKind::f16;
    default:
      DSPARK_FAIL(unsupported, "expected a float dtype, got {}", dtype_name(dtype));
  }
}

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A tensor seen as `rows` rows of `cols` contiguous elements, `stride` elements apart: the last
// dim is the row, the leading dims must collapse into one (a rank-1 tensor is one row).
struct RowView {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
};

inline RowView row_view(const Tensor& t) {
  const int rank = t.dim();
  DSPARK_CHECK(rank >= 1, "row_view: a scalar has no rows ({})", t.describe());
  DSPARK_CHECK(t.rows_contiguous(), "row_view: rows are not contiguous ({})", t.describe());
  RowView v;
  v.cols = t.size(-1);
  if (rank == 1) {
    v.rows = 1;
    v.stride = v.cols;
    return v;
  }
  v.rows = 1;
  for (int d = 0; d < rank - 1; ++d) v.rows *= t.size(d);
  v.stride = t.stride(rank - 2);
  for (int d = 0; d + 2 < rank; ++d) {
    DSPARK_CHECK(t.size(d) == 1 || t.stride(d) == t.stride(d + 1) * t.size(d + 1),
                 "row_view: leading dims of {} do not collapse", t.describe());
  }
  return v;
}

// Stages small host arrays, then uploads them in one asynchronous copy into ctx.scratch().
// Device-only regions (not uploaded) may be reserved after the staged ones. The returned base
// pointer is valid until the next ctx.scratch() call; the host staging may be freed as soon as
// upload() returns (copies from pageable memory are staged by the driver before returning).
class ScratchUpload {
 public:
  // Appends `values`; returns their byte offset from the base.
  template <typename T>
  size_t add(std::span<const T> values) {
    DSPARK_CHECK(reserved_end_ == 0, "ScratchUpload: add() after reserve()");
    const size_t offset = align(staged_.size(), 16);
    staged_.resize(offset + values.size_bytes());
    if (!values.empty()) std::memcpy(staged_.data() + offset, values.data(), values.size_bytes());
    return offset;
  }
  // Reserves `bytes` of device memory after everything staged; returns its byte offset.
  size_t reserve(size_t bytes) {
    const size_t offset = align(std::max(staged_.size(), reserved_end_), 256);
    reserved_end_ = offset + bytes;
    return offset;
  }
  char* upload(Context& ctx) const {
    const size_t total = std::max<size_t>({staged_.size(), reserved_end_, 1});
    char* base = static_cast<char*>(ctx.scratch(total));
    ctx.copy_async(base, staged_.data(), staged_.size());
    return base;
  }

 private:
  static size_t align(size_t v, size_t a) { return (v + a - 1) / a * a; }
  std::vector<char> staged_;
  size_t reserved_end_ = 0;
};

inline int current_device() {
  int device = 0;
  DSPARK_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Sets `kernel`'s attribute kAttr to `value` once per kernel and device: the attribute is per
// device, and a launch path asks every time (the first value set stays).
template <auto* kernel, cudaFuncAttribute kAttr>
void set_func_attribute_once(int value) {
  static std::atomic<uint64_t> configured{0};  // a bit per device id < 64
  const int device = current_device();
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (configured.load(std::memory_order_relaxed) & bit) != 0) return;
  DSPARK_CUDA_CHECK(cudaFuncSetAttribute(kernel, kAttr, value));
  configured.fetch_or(bit, std::memory_order_relaxed);
}

// Lets `kernel` use `bytes` of dynamic shared memory.
template <auto* kernel>
void allow_dynamic_smem(size_t bytes) {
  set_func_attribute_once<kernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(
      static_cast<int>(bytes));
}

// Lets `kernel` be launched in thread-block clusters larger than the portable 8 CTAs (sm_90: up
// to 16).
template <auto* kernel>
void allow_nonportable_clusters() {
  set_func_attribute_once<kernel, cudaFuncAttributeNonPortableClusterSizeAllowed>(1);
}

// Compute capability major of the current device, queried once per device (launch paths ask).
inline int compute_major() {
  constexpr int kCached = 64;
  static std::atomic<int> cache[kCached] = {};  // 0: not asked yet
  const int device = current_device();
  int major = device < kCached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (major == 0) {
    DSPARK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (device < kCached) cache[device].store(major, std::memory_order_relaxed);
  }
  return major;
}

// The most shared memory one CTA of the current device may opt in to, queried once per device.
inline int max_optin_smem() {
  constexpr int kCached = 64;
  static std::atomic<int> cache[kCached] = {};  // 0: not asked yet
  const int device = current_device();
  int bytes = device < kCached ? cache[device].load(std::memory_order_relaxed) : 0;
  if (bytes == 0) {
    DSPARK_CUDA_CHECK(
        cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (device < kCached) cache[device].store(bytes, std::memory_order_relaxed);
  }
  return bytes;
}

}  // namespace dspark::cuda
