// The CUDA-graph bucket caches (backend/graph_cache.h). The eviction policy (evict_lru_bucket):
// least recently used first, by count and by bytes; a cycle of shapes no longer than the cache
// keeps every bucket (a speculative request's tail of shorter drafts), one longer misses every
// time (why the caches are sized well above gamma + 1). GraphCache: find-or-create with the same
// policy, keys per context, buckets made only on a miss, and its runs counted and warned about.
// Host logic only: runs on the CPU (where every capture fails, so runs are eager or fall back).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "dspark/backend/context.h"
#include "dspark/backend/graph_cache.h"

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

// ---- GraphCache ------------------------------------------------------------------------------

struct Bucket {
  size_t size = 0;
  int made = 0;  // how often make() filled this bucket
  size_t bytes() const { return size; }
};
using Cache = GraphCache<int, Bucket>;

// Looks `key` up like the models do; returns whether it hit. A made bucket holds `bytes`.
bool use_cache(Context& ctx, Cache& cache, int key, size_t bytes = 1) {
  bool made = false;
  Cache::Entry& e = cache.find_or_create(ctx, key, [&](Bucket& b) {
    b.size = bytes;
    ++b.made;
    made = true;
  });
  EXPECT_EQ(e.bucket.made, 1) << "key " << key;
  return !made;
}

TEST(GraphCache, FindsOrCreatesAndEvictsLeastRecentlyUsed) {
  Context ctx(Device::cpu());
  Cache cache("", 3);
  for (int k : {1, 2, 3}) EXPECT_FALSE(use_cache(ctx, cache, k));
  EXPECT_TRUE(use_cache(ctx, cache, 1));   // 2 is now the least recently used
  EXPECT_FALSE(use_cache(ctx, cache, 4));  // evicts 2
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_FALSE(cache.contains(ctx, 2));
  for (int k : {1, 3, 4}) EXPECT_TRUE(use_cache(ctx, cache, k));
  // The same entry on every hit.
  Cache::Entry* first = &cache.find_or_create(ctx, 1, [](Bucket&) { FAIL() << "made on a hit"; });
  EXPECT_EQ(&cache.find_or_create(ctx, 1, [](Bucket&) {}), first);
}

TEST(GraphCache, EvictsByBytes) {
  Context ctx(Device::cpu());
  Cache cache("", 16, 100);
  EXPECT_FALSE(use_cache(ctx, cache, 1, 60));
  EXPECT_FALSE(use_cache(ctx, cache, 2, 30));
  EXPECT_FALSE(use_cache(ctx, cache, 3, 50));  // 90 <= 100 before it: nothing evicted
  EXPECT_FALSE(use_cache(ctx, cache, 4, 10));  // 140 > 100: evicts 1 (LRU), then 80
  EXPECT_FALSE(cache.contains(ctx, 1));
  EXPECT_EQ(cache.size(), 3u);
}

// Graphs run on one context's stream: the same shape on another context is another bucket.
TEST(GraphCache, KeysPerContext) {
  Context a(Device::cpu()), b(Device::cpu());
  Cache cache("", 16);
  EXPECT_FALSE(use_cache(a, cache, 7));
  EXPECT_FALSE(use_cache(b, cache, 7));
  EXPECT_TRUE(use_cache(a, cache, 7));
  EXPECT_TRUE(use_cache(b, cache, 7));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(graph_context(a).ctx, &a);
  EXPECT_EQ(graph_context(a).workspace, nullptr);  // no cuBLASLt on the CPU
}

// The run policy seen from a caller: first run eager, then a capture per run until kMaxFailures
// captures failed (on the CPU every capture fails: the work then runs eagerly at once), eager
// after that. Each failure is counted and warned about once, with the caller's description.
TEST(GraphCache, RunCountsAndWarnsPerFailedCapture) {
  Context ctx(Device::cpu());
  Cache cache("a test step", 4);
  Cache::Entry& entry = cache.find_or_create(ctx, 1, [](Bucket&) {});
  int64_t replays = 0, captures = 0, fallbacks = 0;
  int enqueued = 0, described = 0;
  auto run = [&] {
    testing::internal::CaptureStderr();
    const GraphSet::Outcome outcome = cache.run(
        ctx, entry, 3, {}, GraphCounters{replays, captures, fallbacks}, [&] { ++enqueued; },
        [&] {
          ++described;
          return std::string("2 rows");
        });
    return std::make_pair(outcome, testing::internal::GetCapturedStderr());
  };
  auto [outcome, warning] = run();
  EXPECT_EQ(outcome, GraphSet::Outcome::eager);
  EXPECT_EQ(warning, "");
  for (int failure = 1; failure <= GraphSet::kMaxFailures; ++failure) {
    std::tie(outcome, warning) = run();
    EXPECT_EQ(outcome, GraphSet::Outcome::fallback);
    EXPECT_EQ(warning.rfind("warning: CUDA graph capture of a test step failed (2 rows), running "
                            "eagerly: ",
                            0),
              0u)
        << warning;
    EXPECT_EQ(fallbacks, failure);
  }
  std::tie(outcome, warning) = run();
  EXPECT_EQ(outcome, GraphSet::Outcome::eager);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(enqueued, 2 + GraphSet::kMaxFailures);  // every run did the work exactly once
  EXPECT_EQ(described, GraphSet::kMaxFailures);
  EXPECT_EQ(replays, 0);
  EXPECT_EQ(captures, 0);
  EXPECT_FALSE(entry.graphs.last_error().empty());
  EXPECT_EQ(entry.graphs.n_graphs(), 0u);
}

TEST(GraphCache, WarningWithoutName) {
  testing::internal::CaptureStderr();
  warn_graph_fallback("", "5 tokens, 1 rows, 2 splits", "boom");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "warning: CUDA graph capture failed (5 tokens, 1 rows, 2 splits), running eagerly: "
            "boom\n");
}

}  // namespace
}  // namespace dspark
