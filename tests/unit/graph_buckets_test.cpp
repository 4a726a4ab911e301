// The eviction policy of the CUDA-graph bucket maps (backend/graph_set.h, evict_lru_bucket): least
// recently used first, by count and by bytes; a cycle of shapes no longer than the cache keeps
// every bucket (a speculative request's tail of shorter drafts), one longer misses every time (why
// the caches are sized well above gamma + 1). Host logic only: runs on the CPU.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "dspark/backend/context.h"
#include "dspark/backend/graph_set.h"

namespace dspark {
namespace {

struct FakeBucket {
  uint64_t last_use = 0;
  size_t size = 0;
  size_t bytes() const { return size; }
};
using FakeMap = std::map<int, std::unique_ptr<FakeBucket>>;

// Looks `key` up like the models do: on a miss, evicts then inserts. Returns whether it hit.
bool use(Context& ctx, FakeMap& buckets, uint64_t& tick, int key, size_t max_buckets,
         size_t bytes = 1, size_t max_bytes = kGraphBucketsMaxBytes) {
  auto it = buckets.find(key);
  const bool hit = it != buckets.end();
  if (!hit) {
    evict_lru_bucket(ctx, buckets, max_buckets, max_bytes);
    it = buckets.emplace(key, std::make_unique<FakeBucket>(FakeBucket{0, bytes})).first;
  }
  it->second->last_use = ++tick;
  return hit;
}

TEST(GraphBuckets, EvictsLeastRecentlyUsedByCount) {
  Context ctx(Device::cpu());
  FakeMap buckets;
  uint64_t tick = 0;
  for (int k : {1, 2, 3}) EXPECT_FALSE(use(ctx, buckets, tick, k, 3));
  EXPECT_TRUE(use(ctx, buckets, tick, 1, 3));   // 2 is now the least recently used
  EXPECT_FALSE(use(ctx, buckets, tick, 4, 3));  // evicts 2
  EXPECT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets.count(2), 0u);
  EXPECT_TRUE(use(ctx, buckets, tick, 1, 3));
  EXPECT_TRUE(use(ctx, buckets, tick, 3, 3));
  EXPECT_TRUE(use(ctx, buckets, tick, 4, 3));
}

TEST(GraphBuckets, EvictsByBytes) {
  Context ctx(Device::cpu());
  FakeMap buckets;
  uint64_t tick = 0;
  // 100 bytes allowed before a new bucket: 60 + 30 fit, a third bucket needs room below 100.
  EXPECT_FALSE(use(ctx, buckets, tick, 1, 16, 60, 100));
  EXPECT_FALSE(use(ctx, buckets, tick, 2, 16, 30, 100));
  EXPECT_FALSE(use(ctx, buckets, tick, 3, 16, 50, 100));  // 90 <= 100: nothing evicted
  EXPECT_EQ(buckets.size(), 3u);
  EXPECT_FALSE(use(ctx, buckets, tick, 4, 16, 10, 100));  // 140 > 100: evicts 1 (LRU), then 80
  EXPECT_EQ(buckets.count(1), 0u);
  EXPECT_EQ(buckets.size(), 3u);
}

// gamma = 16 with random drafts: 17-token verifies, then a tail of 16, 15, ..., 2 tokens and a
// one-token step, run after run. A cache of 16 misses every shape of the tail and then the main
// one on every run; one larger than the cycle misses nothing after the first run.
TEST(GraphBuckets, SpeculativeTailCycle) {
  auto misses_in_third_run = [](size_t max_buckets) {
    Context ctx(Device::cpu());
    FakeMap buckets;
    uint64_t tick = 0;
    int misses = 0;
    for (int run = 0; run < 3; ++run) {
      for (int round = 0; round < 40; ++round)
        if (!use(ctx, buckets, tick, 17, max_buckets) && run == 2) ++misses;
      for (int width = 16; width >= 1; --width)
        if (!use(ctx, buckets, tick, width, max_buckets) && run == 2) ++misses;
    }
    return misses;
  };
  EXPECT_EQ(misses_in_third_run(16), 17);
  EXPECT_EQ(misses_in_third_run(17), 0);
  EXPECT_EQ(misses_in_third_run(96), 0);
}

}  // namespace
}  // namespace dspark
