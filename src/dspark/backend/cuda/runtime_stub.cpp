// The CUDA runtime in a build without CUDA: queries answer "none", everything else reports
// "built without CUDA".
#include "dspark/backend/cuda/runtime.h"

#include "dspark/core/error.h"

namespace dspark::cuda {
namespace {
[[noreturn]] void no_cuda() {
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
  no_cuda();
}
void set_device(int) {
  no_cuda();
}
std::string device_name(int) {
  no_cuda();
}
DeviceInfo device_info(int) {
  no_cuda();
}
MemoryInfo memory_info(int) {
  no_cuda();
}
void* malloc_device(size_t) {
  no_cuda();
}
void free_device(void*) noexcept {}
void* malloc_host_pinned(size_t) {
  no_cuda();
}
void free_host_pinned(void*) noexcept {}
void memcpy_sync(void*, const void*, size_t) {
  no_cuda();
}
void memset_sync(void*, int, size_t) {
  no_cuda();
}
void device_synchronize() {
  no_cuda();
}
double measure_copy_bandwidth(int, size_t) {
  no_cuda();
}
void set_blocking_sync(int) {
  no_cuda();
}

Stream::Stream(int) {
  no_cuda();
}
Stream::~Stream() = default;
Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_) {}
Stream& Stream::operator=(Stream&&) noexcept {
  return *this;
}
void Stream::synchronize() const {
  no_cuda();
}
void Stream::memcpy_async(void*, const void*, size_t) const {
  no_cuda();
}
void Stream::memset_async(void*, int, size_t) const {
  no_cuda();
}

Event::Event(bool) {
  no_cuda();
}
Event::~Event() = default;
Event::Event(Event&& other) noexcept : handle_(other.handle_) {}
Event& Event::operator=(Event&&) noexcept {
  return *this;
}
void Event::record(const Stream&) {
  no_cuda();
}
void Event::synchronize() const {
  no_cuda();
}
float Event::elapsed_ms_since(const Event&) const {
  no_cuda();
}

}  // namespace dspark::cuda
