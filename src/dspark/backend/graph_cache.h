// The graph buckets of one kind of graphed work (a target forward, a drafter's round, a drafter's
// commit): one bucket per launch shape, each with the caller's device buffers its graphs read and
// a GraphSet (backend/graph_set.h) of those graphs, least recently used ones evicted under a count
// and a byte budget.
//
// The caller keeps what is its own: its key type (the shape: sizes, and the addresses of buffers
// it does not own that its graphs read), its bucket type (metadata and activation buffers, with a
// bytes() of device memory), the enqueue callable and its counters. The cache adds to every key
// the context the graphs run on and the context-level buffers they bake in (graph_context), so
// that callers need no backend knowledge. Host code: built with and without CUDA.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "dspark/backend/context.h"
#include "dspark/backend/graph_set.h"

namespace dspark {

// The device memory the graph buckets of one cache may keep (see evict_lru_bucket).
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

// The context-level part of every graph key: the context the graphs run on and the buffers of it
// that a graph bakes in for good (the cuBLASLt workspace on CUDA). The context's scratch, which
// may move, is checked by GraphSet::run instead.
struct GraphContext {
  const Context* ctx = nullptr;
  const void* workspace = nullptr;
  auto operator<=>(const GraphContext&) const = default;
};
GraphContext graph_context(const Context& ctx);

template <typename Key, typename Bucket>
class GraphCache {
 public:
  struct Entry {
    Bucket bucket;
    GraphSet graphs;  // by variant (e.g. attention_graph_variant)
    uint64_t last_use = 0;
    size_t bytes() const { return bucket.bytes(); }
  };

  // `what` names the work in warnings ("a draft round"; empty: none). At most `max_buckets`
  // buckets, and `max_bytes` of them before a new one (evict_lru_bucket).
  GraphCache(std::string what, size_t max_buckets, size_t max_bytes = kGraphBucketsMaxBytes)
      : what_(std::move(what)), max_buckets_(max_buckets), max_bytes_(max_bytes) {}

  // The bucket of `key` on ctx, marked as used now. A missing one is made by make(Bucket&) after
  // evicting least recently used ones. A hit copies nothing (the key may hold vectors).
  template <typename Make>
  Entry& find_or_create(Context& ctx, const Key& key, Make&& make) {
    const GraphContext context = graph_context(ctx);
    auto it = entries_.find(KeyRef{context, key});
    if (it == entries_.end()) {
      evict_lru_bucket(ctx, entries_, max_buckets_, max_bytes_);
      auto entry = std::make_unique<Entry>();
      make(entry->bucket);
      it = entries_.emplace(FullKey{context, key}, std::move(entry)).first;
    }
    it->second->last_use = ++tick_;
    return *it->second;
  }

  // Runs `enqueue` through the entry's graph of `variant` (GraphSet::run, with the caller's baked
  // pointers), adds the outcome to `counters` and, when a capture failed, warns with
  // describe() (the shape, e.g. "3 rows, 4 drafts"; called only then).
  template <typename Describe>
  GraphSet::Outcome run(Context& ctx, Entry& entry, int variant, std::span<const void* const> baked,
                        GraphCounters counters, EnqueueRef enqueue, Describe&& describe) {
    const GraphSet::Outcome outcome = entry.graphs.run(ctx, variant, baked, enqueue);
    count_graph_outcome(outcome, counters);
    if (outcome == GraphSet::Outcome::fallback)
      warn_graph_fallback(what_, describe(), entry.graphs.last_error());
    return outcome;
  }

  size_t size() const { return entries_.size(); }
  bool contains(const Context& ctx, const Key& key) const {
    return entries_.find(KeyRef{graph_context(ctx), key}) != entries_.end();
  }

 private:
  struct FullKey {
    GraphContext context;
    Key key;
  };
  struct KeyRef {
    const GraphContext& context;
    const Key& key;
  };
  struct Less {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return std::tie(a.context, a.key) < std::tie(b.context, b.key);
    }
  };

  std::string what_;
  size_t max_buckets_, max_bytes_;
  std::map<FullKey, std::unique_ptr<Entry>, Less> entries_;
  uint64_t tick_ = 0;
};

}  // namespace dspark
