// The memory seam between core and the backends: core/buffer.cpp allocates through these, and the
// backend defines them (backend/device_memory.cpp; the CUDA half is a stub in a build without CUDA,
// which reports "built without CUDA").
#pragma once

#include <cstddef>

#include "dspark/core/device.h"

namespace dspark {

// Allocate `bytes` on `device` (never returns null: throws out_of_memory / unsupported).
void* device_allocate(Device device, size_t bytes);
void device_free(Device device, void* ptr) noexcept;
// Zero-filled host memory whose pages are mapped on first touch: a large cache reserved up front
// costs neither resident memory nor start-up time until it is used. Free with host_unmap.
void* host_map_zeroed(size_t bytes);
void host_unmap(void* ptr, size_t bytes) noexcept;
// Host buffers from this size up are zeroed by mapping (smaller ones by memset).
inline constexpr size_t kHostMapMinBytes = size_t{1} << 20;
// Synchronous copy between any two devices (host <-> device, device <-> device).
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void device_memset(void* dst, Device device, int value, size_t bytes);

}  // namespace dspark
