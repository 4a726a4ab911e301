// The graph module's backend-neutral core: the CUDA graphs of one launch shape, one per variant,
// and what callers key them by. Model and drafter code reaches graphs only through this header and
// backend/graph_cache.h (the per-shape buckets); the CUDA side (backend/cuda/graph.h) stays behind
// graph_set.cpp. Built with and without CUDA.
//
// GraphSet::run enqueues the work of `enqueue` on the context's stream:
//   - eagerly on the first run of a variant (cuBLASLt plans, scratch growth and first-use
//     allocations happen then: capture may not do them);
//   - captured into a graph and launched on the second run;
//   - by replaying that graph afterwards.
// A graph is captured again when a pointer it baked in that may move between runs differs from
// the one seen at capture: the context's scratch (Context::scratch_data, checked by the set
// itself) and the caller's own (`baked`, e.g. a drafter's constant buffers). A variant whose
// capture failed kMaxFailures times runs eagerly from then on; a failed capture runs the work
// eagerly at once (nothing is lost) and returns Outcome::fallback with the error in last_error().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "dspark/backend/context.h"

namespace dspark {

// True when the environment asks for graphs: DSPARK_CUDA_GRAPHS=1 (read once).
bool graphs_enabled_by_env();

// The launch shape of a paged attention over a batch: n_tokens queries of n_rows sequences whose
// page table holds total_pages pages (page_indices.numel()) of page_size tokens.
struct AttentionGraphShape {
  int64_t n_tokens = 0, n_heads = 0, n_kv_heads = 0, n_rows = 0, total_pages = 0, page_size = 0;
};

// The graph variant of a forward with this attention: graphs of the same shape are keyed by it
// because the backend's attention launch changes with it (on CUDA the key split count, which
// changes with the context length while the batch is small; a graph captured at the same count
// replays bitwise equal to the eager forward). 0 on a CPU context.
int attention_graph_variant(const Context& ctx, const AttentionGraphShape& shape);

// A non-owning reference to the callable that enqueues a graph's work: passed by value, no
// allocation per run. The callable must outlive the call it is passed to.
class EnqueueRef {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, EnqueueRef> &&
                                        std::is_invocable_v<F&>>>
  EnqueueRef(F&& f) noexcept  // NOLINT: implicit, callers pass a lambda
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_(&invoke<std::remove_reference_t<F>>) {}
  void operator()() const { call_(callable_); }

 private:
  template <typename F>
  static void invoke(void* f) {
    (*static_cast<F*>(f))();
  }
  void* callable_;
  void (*call_)(void*);
};

class GraphSet {
 public:
  enum class Outcome { eager, captured, replayed, fallback };
  static constexpr int kMaxFailures = 2;

  GraphSet();
  ~GraphSet();
  GraphSet(GraphSet&& other) noexcept;
  GraphSet& operator=(GraphSet&& other) noexcept;
  GraphSet(const GraphSet&) = delete;
  GraphSet& operator=(const GraphSet&) = delete;

  Outcome run(Context& ctx, int variant, std::span<const void* const> baked, EnqueueRef enqueue);
  // Forgets every graph (the buffers they read have moved); warm-ups stay done.
  void clear();
  const std::string& last_error() const;
  size_t n_graphs() const;

 private:
  struct State;  // the graphs (backend/cuda/graph.h), warm-ups and failures
  std::unique_ptr<State> state_;
};

// A caller's counters of graph outcomes (e.g. ForwardStats::graph_replays, graph_captures,
// graph_fallbacks).
struct GraphCounters {
  int64_t& replays;
  int64_t& captures;
  int64_t& fallbacks;
};

// Adds one run's outcome to a caller's counters (a captured run was also launched: a replay).
void count_graph_outcome(GraphSet::Outcome outcome, GraphCounters counters);

// The warning of a failed capture on stderr: "warning: CUDA graph capture[ of <what>] failed
// (<details>), running eagerly: <error>" (`what` may be empty).
void warn_graph_fallback(std::string_view what, std::string_view details, std::string_view error);

}  // namespace dspark
