#include "dspark/backend/graph_set.h"

#include <algorithm>

#include "dspark/core/error.h"

namespace dspark {

GraphSet::Outcome GraphSet::run(Context& ctx, int variant, std::span<const void* const> baked,
                                const std::function<void()>& enqueue) {
  auto it = execs_.find(variant);
  if (it != execs_.end() && !std::ranges::equal(it->second.baked, baked)) {
    execs_.erase(it);  // a baked pointer moved: the graph would read freed memory
    it = execs_.end();
  }
  if (it != execs_.end()) {
    it->second.graph.launch(ctx);
    return Outcome::replayed;
  }
  if (!warmed_.contains(variant) || failures_[variant] >= kMaxFailures) {
    enqueue();
    warmed_.insert(variant);
    return Outcome::eager;
  }
  try {
    cuda::Graph graph = cuda::Graph::capture(ctx, enqueue);
    it = execs_
             .emplace(variant,
                      Exec{std::move(graph), std::vector<const void*>(baked.begin(), baked.end())})
             .first;
  } catch (const Error& e) {
    ++failures_[variant];
    last_error_ = e.what();
    enqueue();
    return Outcome::fallback;
  }
  it->second.graph.launch(ctx);
  return Outcome::captured;
}

void count_graph_outcome(GraphSet::Outcome outcome, int64_t& replays, int64_t& captures,
                         int64_t& fallbacks) {
  switch (outcome) {
    case GraphSet::Outcome::eager:
      break;
    case GraphSet::Outcome::captured:
      ++captures;
      ++replays;
      break;
    case GraphSet::Outcome::replayed:
      ++replays;
      break;
    case GraphSet::Outcome::fallback:
      ++fallbacks;
      break;
  }
}

}  // namespace dspark
