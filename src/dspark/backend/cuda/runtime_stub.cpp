// The CUDA runtime in a build without CUDA: queries answer "none", everything else reports
// "built without CUDA".
#include "dspark/backend/cuda/runtime.h"

#include "dspark/core/error.h"

namespace dspark::cuda {
namespace {
[[noreturn]] void no_cuda_runtime() {
  DSPARK_FAIL(unsupported,
              "dspark was built without CUDA: use --device cpu, or rebuild with nvcc "
              "on the PATH");
}
}  // namespace

bool built_with_cuda() {
  return false;
}
int device_count() {
  return 0;
}
void require_device(int) {
  no_cuda_runtime();
}
void set_device(int) {
  no_cuda_runtime();
}
std::string device_name(int) {
  no_cuda_runtime();
}
DeviceInfo device_info(int) {
  no_cuda_runtime();
}
MemoryInfo memory_info(int) {
  no_cuda_runtime();
}
void* malloc_device(size_t) {
  no_cuda_runtime();
}
void free_device(void*) noexcept {}
void* malloc_host_pinned(size_t) {
  no_cuda_runtime();
}
void free_host_pinned(void*) noexcept {}
void memcpy_sync(void*, const void*, size_t) {
  no_cuda_runtime();
}
void memset_sync(void*, int, size_t) {
  no_cuda_runtime();
}
void device_synchronize() {
  no_cuda_runtime();
}
double measure_copy_bandwidth(int, size_t) {
  no_cuda_runtime();
}
void set_blocking_sync(int) {
  no_cuda_runtime();
}

Stream::Stream(int) {
  no_cuda_runtime();
}
Stream::~Stream() = default;
Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_) {}
Stream& Stream::operator=(Stream&&) noexcept {
  return *this;
}
void Stream::synchronize() const {
  no_cuda_runtime();
}
void Stream::memcpy_async(void*, const void*, size_t) const {
  no_cuda_runtime();
}
void Stream::memset_async(void*, int, size_t) const {
  no_cuda_runtime();
}

Event::Event(bool) {
  no_cuda_runtime();
}
Event::~Event() = default;
Event::Event(Event&& other) noexcept : handle_(other.handle_) {}
Event& Event::operator=(Event&&) noexcept {
  return *this;
}
void Event::record(const Stream&) {
  no_cuda_runtime();
}
void Event::synchronize() const {
  no_cuda_runtime();
}
float Event::elapsed_ms_since(const Event&) const {
  no_cuda_runtime();
}

}  // namespace dspark::cuda
