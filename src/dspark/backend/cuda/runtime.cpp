#include "dspark/backend/cuda/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "dspark/backend/cuda/check.h"

namespace dspark::cuda {

namespace detail {
void fail_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  const ErrorKind kind =
      err == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::device;
  dspark::detail::fail(kind, expr, file, line,
                       fmt::format("CUDA error {} ({}): {}", static_cast<int>(err),
                                   cudaGetErrorName(err), cudaGetErrorString(err)));
}
void fail_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  dspark::detail::fail(ErrorKind::device, expr, file, line,
                       fmt::format("cuBLAS error {}", static_cast<int>(status)));
}
}  // namespace detail

bool built_with_cuda() {
  return true;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void require_device(int index) {
  const int n = device_count();
  DSPARK_CHECK_KIND(unsupported, n > 0, "no CUDA device is visible (this build has CUDA)");
  DSPARK_CHECK_KIND(invalid_input, index >= 0 && index < n, "CUDA device {} requested, {} visible",
                    index, n);
}

void set_device(int index) {
  DSPARK_CUDA_CHECK(cudaSetDevice(index));
}

std::string device_name(int index) {
  return device_info(index).name;
}

DeviceInfo device_info(int index) {
  cudaDeviceProp prop{};
  DSPARK_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.major = prop.major;
  info.minor = prop.minor;
  info.total_memory = prop.totalGlobalMem;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  return info;
}

MemoryInfo memory_info(int index) {
  int current = 0;
  DSPARK_CUDA_CHECK(cudaGetDevice(&current));
  DSPARK_CUDA_CHECK(cudaSetDevice(index));
  MemoryInfo info;
  const cudaError_t err = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  DSPARK_CUDA_CHECK(cudaSetDevice(current));
  DSPARK_CUDA_CHECK(err);
  return info;
}

void* malloc_device(size_t bytes) {
  void* p = nullptr;
  DSPARK_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void free_device(void* ptr) noexcept {
  (void)cudaFree(ptr);
}
void* malloc_host_pinned(size_t bytes) {
  void* p = nullptr;
  DSPARK_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}
void free_host_pinned(void* ptr) noexcept {
  (void)cudaFreeHost(ptr);
}
void memcpy_sync(void* dst, const void* src, size_t bytes) {
  DSPARK_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}
void memset_sync(void* dst, int value, size_t bytes) {
  DSPARK_CUDA_CHECK(cudaMemset(dst, value, bytes));
}
void device_synchronize() {
  DSPARK_CUDA_CHECK(cudaDeviceSynchronize());
}

void set_blocking_sync(int device) {
  set_device(device);
  DSPARK_CUDA_CHECK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
}

double measure_copy_bandwidth(int device, size_t bytes) {
  set_device(device);
  Stream stream(device);
  void* a = malloc_device(bytes);
  void* b = malloc_device(bytes);
  DSPARK_CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, static_cast<cudaStream_t>(stream.handle())));
  Event start, stop;
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    start.record(stream);
    stream.memcpy_async(i % 2 ? a : b, i % 2 ? b : a, bytes);
    stop.record(stream);
    stop.synchronize();
    if (i >= 2) ms.push_back(stop.elapsed_ms_since(start));  // first copies warm up
  }
  free_device(a);
  free_device(b);
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

Stream::Stream(int device) : device_(device) {
  DSPARK_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  // A blocking stream: synchronous copies (cudaMemcpy on the legacy default stream, used by
  // OwnedTensor::copy_of / to_vector) wait for the work enqueued here, so reading results is safe.
  DSPARK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
  handle_ = s;
}
Stream::~Stream() {
  if (handle_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}
Stream::Stream(Stream&& other) noexcept : handle_(other.handle_), device_(other.device_) {
  other.handle_ = nullptr;
}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (handle_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
    handle_ = other.handle_;
    device_ = other.device_;
    other.handle_ = nullptr;
  }
  return *this;
}
void Stream::synchronize() const {
  DSPARK_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}
void Stream::memcpy_async(void* dst, const void* src, size_t bytes) const {
  DSPARK_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(handle_)));
}
void Stream::memset_async(void* dst, int value, size_t bytes) const {
  DSPARK_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(handle_)));
}

Event::Event(bool timing) {
  cudaEvent_t e = nullptr;
  DSPARK_CUDA_CHECK(
      cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  handle_ = e;
}
Event::~Event() {
  if (handle_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}
Event::Event(Event&& other) noexcept : handle_(other.handle_) {
  other.handle_ = nullptr;
}
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}
void Event::record(const Stream& stream) {
  DSPARK_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_),
                                    static_cast<cudaStream_t>(stream.handle())));
}
void Event::synchronize() const {
  DSPARK_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  DSPARK_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_),
                                         static_cast<cudaEvent_t>(handle_)));
  return ms;
}

}  // namespace dspark::cuda
