// OwnedTensor::zeros: zero-filled at every size; large host buffers are mapped lazily, so
// reserving one (a KV cache) costs no resident memory until it is written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <fstream>

#include "dspark/core/buffer.h"
#include "dspark/core/device_memory.h"

namespace dspark {
namespace {

// Resident bytes of this process (/proc/self/statm; Linux).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(BufferZeros, SmallAndLargeAreZero) {
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
    const OwnedTensor t = OwnedTensor::zeros(DType::f32, Shape{n}, Device::cpu());
    const float* p = static_cast<const float*>(t->data());
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(p[i], 0.0f) << n << " at " << i;
    ASSERT_EQ(p[n - 1], 0.0f);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  }
}

TEST(BufferZeros, LargeHostBufferIsResidentOnlyWhereWritten) {
  constexpr int64_t kFloats = int64_t{256} << 20;  // 1 GiB
  const int64_t before = resident_bytes();
  OwnedTensor t = OwnedTensor::zeros(DType::f32, Shape{kFloats}, Device::cpu());
  EXPECT_LT(resident_bytes() - before, int64_t{64} << 20);
  float* p = static_cast<float*>(t->data());
  for (int64_t i = 0; i < (int64_t{16} << 20); ++i) p[i] = 1.0f;  // write the first 64 MiB
  const int64_t grown = resident_bytes() - before;
  EXPECT_GE(grown, int64_t{60} << 20);
  EXPECT_LT(grown, int64_t{160} << 20);
  EXPECT_EQ(p[kFloats - 1], 0.0f);
  EXPECT_GE(memory_stats(Device::cpu()).active_bytes, int64_t{1} << 30);
}

}  // namespace
}  // namespace dspark
