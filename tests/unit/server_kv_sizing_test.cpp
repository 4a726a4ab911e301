// dspark serve's default KV size (server/engine_worker.h, default_kv_tokens): the CPU's modest
// cap, CUDA's share of the free memory after a margin, halved for a drafter's own cache, bounded
// by max_batch full-context requests and never below one.
#include <gtest/gtest.h>

#include "dspark/server/engine_worker.h"

namespace dspark::server {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

TEST(ServeKvSizing, CpuIsModest) {
  KvSizing s;
  s.per_request = 8272;  // 8k context + draft slack
  s.max_batch = 32;
  s.bytes_per_token = 1 << 14;
  EXPECT_EQ(default_kv_tokens(s), kDefaultCpuKvTokens);
  s.max_batch = 1;
  EXPECT_EQ(default_kv_tokens(s), 8272);
  s.per_request = 40000;  // one request larger than the cap still fits
  EXPECT_EQ(default_kv_tokens(s), 40000);
}

TEST(ServeKvSizing, CudaTakesFreeMemoryLessMargin) {
  KvSizing s;
  s.cuda = true;
  s.per_request = 4160;
  s.max_batch = 4096;  // memory-bound
  s.bytes_per_token = 128 * 1024;
  s.total_bytes = 140 * kGiB;
  s.free_bytes = 100 * kGiB;
  // Margin 14 GiB (a tenth of the device): 86 GiB / 128 KiB.
  EXPECT_EQ(default_kv_tokens(s), static_cast<int64_t>(86 * kGiB / (128 * 1024)));
  s.drafter_cache = true;
  EXPECT_EQ(default_kv_tokens(s), static_cast<int64_t>(43 * kGiB / (128 * 1024)));
  s.drafter_cache = false;
  s.total_bytes = 8 * kGiB;  // small device: the 1 GiB floor
  s.free_bytes = 5 * kGiB;
  EXPECT_EQ(default_kv_tokens(s), static_cast<int64_t>(4 * kGiB / (128 * 1024)));
  s.max_batch = 2;  // batch-bound
  EXPECT_EQ(default_kv_tokens(s), 2 * 4160);
  s.free_bytes = kGiB / 2;  // nothing left: one request (the allocation then reports the failure)
  EXPECT_EQ(default_kv_tokens(s), 4160);
}

}  // namespace
}  // namespace dspark::server
