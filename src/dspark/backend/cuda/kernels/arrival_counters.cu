#include "dspark/backend/cuda/kernels/arrival_counters.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "dspark/backend/cuda/check.h"
#include "dspark/core/error.h"

namespace dspark::cuda {

unsigned* arrival_counters(const Context& ctx, ArrivalPool pool, size_t n) {
  constexpr int kMaxDevices = 64;
  constexpr auto kPools = static_cast<size_t>(ArrivalPool::count);
  struct Buffer {
    void* data = nullptr;
    size_t n = 0;
  };
  static std::mutex mutex;
  static std::array<std::array<Buffer, kPools>, kMaxDevices> buffers{};
  const int device = ctx.device().index;
  const auto p = static_cast<size_t>(pool);
  DSPARK_CHECK(device >= 0 && device < kMaxDevices && p < kPools,
               "arrival_counters: device {}, pool {}", device, p);
  std::lock_guard<std::mutex> lock(mutex);
  Buffer& b = buffers[static_cast<size_t>(device)][p];
  if (b.data == nullptr) {
    if (ctx.capturing()) return nullptr;
    DSPARK_CUDA_CHECK(cudaMalloc(&b.data, n * sizeof(unsigned)));
    DSPARK_CUDA_CHECK(cudaMemset(b.data, 0, n * sizeof(unsigned)));
    b.n = n;
  }
  DSPARK_CHECK(b.n == n, "arrival_counters: pool {} holds {} counters, asked for {}", p, b.n, n);
  return static_cast<unsigned*>(b.data);
}

}  // namespace dspark::cuda
