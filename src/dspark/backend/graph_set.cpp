// The graph module's policy (contract: backend/graph_set.h) over the CUDA graphs of
// backend/cuda/graph.h.
#include "dspark/backend/graph_set.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dspark/backend/cuda/graph.h"
#include "dspark/core/error.h"

namespace dspark {

bool graphs_enabled_by_env() {
  static const bool enabled = [] {
    const char* env = std::getenv("DSPARK_CUDA_GRAPHS");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return enabled;
}

struct GraphSet::State {
  struct Exec {
    cuda::Graph graph;
    const void* scratch = nullptr;  // the context's scratch at capture
    std::vector<const void*> baked;
  };
  std::map<int, Exec> execs;
  std::set<int> warmed;
  std::map<int, int> failures;
  std::string last_error;
};

GraphSet::GraphSet() : state_(std::make_unique<State>()) {}
GraphSet::~GraphSet() = default;
GraphSet::GraphSet(GraphSet&& other) noexcept = default;
GraphSet& GraphSet::operator=(GraphSet&& other) noexcept = default;

void GraphSet::clear() {
  state_->execs.clear();
}

const std::string& GraphSet::last_error() const {
  return state_->last_error;
}

size_t GraphSet::n_graphs() const {
  return state_->execs.size();
}

GraphSet::Outcome GraphSet::run(Context& ctx, int variant, std::span<const void* const> baked,
                                EnqueueRef enqueue) {
  State& s = *state_;
  const void* scratch = ctx.scratch_data();
  auto it = s.execs.find(variant);
  if (it != s.execs.end() &&
      (it->second.scratch != scratch || !std::ranges::equal(it->second.baked, baked))) {
    s.execs.erase(it);  // a baked pointer moved: the graph would read freed memory
    it = s.execs.end();
  }
  if (it != s.execs.end()) {
    it->second.graph.launch(ctx);
    return Outcome::replayed;
  }
  if (!s.warmed.contains(variant) || s.failures[variant] >= kMaxFailures) {
    enqueue();
    s.warmed.insert(variant);
    return Outcome::eager;
  }
  try {
    cuda::Graph graph = cuda::Graph::capture(ctx, std::function<void()>(enqueue));
    it = s.execs
             .emplace(variant, State::Exec{std::move(graph), scratch,
                                           std::vector<const void*>(baked.begin(), baked.end())})
             .first;
  } catch (const Error& e) {
    ++s.failures[variant];
    s.last_error = e.what();
    enqueue();
    return Outcome::fallback;
  }
  it->second.graph.launch(ctx);
  return Outcome::captured;
}

void count_graph_outcome(GraphSet::Outcome outcome, GraphCounters counters) {
  switch (outcome) {
    case GraphSet::Outcome::eager:
      break;
    case GraphSet::Outcome::captured:
      ++counters.captures;
      ++counters.replays;
      break;
    case GraphSet::Outcome::replayed:
      ++counters.replays;
      break;
    case GraphSet::Outcome::fallback:
      ++counters.fallbacks;
      break;
  }
}

void warn_graph_fallback(std::string_view what, std::string_view details, std::string_view error) {
  fmt::print(stderr, "warning: CUDA graph capture{}{} failed ({}), running eagerly: {}\n",
             what.empty() ? "" : " of ", what, details, error);
}

}  // namespace dspark
