// The CUDA graphs of one launch shape, one per variant (e.g. the attention's split count, which
// changes with the context length while the batch is small): the policy every graphed step shares.
//
// run() enqueues the work of `enqueue` on the context's stream:
//   - eagerly on the first run of a variant (cuBLASLt plans, scratch growth and first-use
//     allocations happen then: capture may not do them);
//   - captured into a graph and launched on the second run;
//   - by replaying that graph afterwards.
// A graph is captured again when a pointer it baked in that may move between runs (`baked`, e.g.
// the context's scratch) differs from the one seen at capture. A variant whose capture failed
// kMaxFailures times runs eagerly from then on; a failed capture runs the work eagerly at once
// (nothing is lost) and returns Outcome::fallback with the error in last_error().
// Host code (the graphs come from backend/cuda/graph.h): built with and without CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/graph.h"

namespace dspark {

class GraphSet {
 public:
  enum class Outcome { eager, captured, replayed, fallback };
  static constexpr int kMaxFailures = 2;

  Outcome run(Context& ctx, int variant, std::span<const void* const> baked,
              const std::function<void()>& enqueue);
  // Forgets every graph (the buffers they read have moved); warm-ups stay done.
  void clear() { execs_.clear(); }
  const std::string& last_error() const { return last_error_; }
  size_t n_graphs() const { return execs_.size(); }

 private:
  struct Exec {
    cuda::Graph graph;
    std::vector<const void*> baked;
  };
  std::map<int, Exec> execs_;
  std::set<int> warmed_;
  std::map<int, int> failures_;
  std::string last_error_;
};

// The device memory the graph buckets of one map may keep (see evict_lru_bucket).
inline constexpr size_t kGraphBucketsMaxBytes = size_t{4} << 30;

// Makes room for one more bucket in a map of graph buckets (values: unique_ptr to a struct with a
// `last_use` tick and a `bytes()` of device memory) that may hold `max_buckets` buckets and, before
// the new one, `max_bytes` bytes: evicts least recently used ones, after synchronising ctx (queued
// work may still read the evicted buffers). The count must exceed the shapes a workload cycles
// through: least-recently-used eviction of a cycle one longer than the cache misses every time
// (a speculative request's last rounds draft gamma - 1, gamma - 2, ... tokens: gamma + 1 verify
// shapes, each evicted just before its next use when the cache held 16).
template <typename BucketMap>
void evict_lru_bucket(Context& ctx, BucketMap& buckets, size_t max_buckets,
                      size_t max_bytes = kGraphBucketsMaxBytes) {
  size_t bytes = 0;
  for (const auto& entry : buckets) bytes += entry.second->bytes();
  bool synced = false;
  while (!buckets.empty() && (buckets.size() >= max_buckets || bytes > max_bytes)) {
    auto lru = buckets.begin();
    for (auto it = buckets.begin(); it != buckets.end(); ++it)
      if (it->second->last_use < lru->second->last_use) lru = it;
    if (!synced) ctx.synchronize();
    synced = true;
    bytes -= lru->second->bytes();
    buckets.erase(lru);
  }
}

// Adds one run's outcome to a caller's counters (a captured run was also launched: a replay).
void count_graph_outcome(GraphSet::Outcome outcome, int64_t& replays, int64_t& captures,
                         int64_t& fallbacks);

}  // namespace dspark
