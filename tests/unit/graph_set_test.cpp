// The backend-neutral pieces of the graph module (backend/graph_set.h) that run without a GPU: the
// outcome counting every graphed caller shares, the enqueue reference (no copy of the callable),
// and the graph variant of a CPU context (always 0).
#include <gtest/gtest.h>

#include "dspark/backend/context.h"
#include "dspark/backend/graph_set.h"

namespace dspark {
namespace {

TEST(GraphSet, CountsOutcomes) {
  int64_t replays = 0, captures = 0, fallbacks = 0;
  const GraphCounters counters{replays, captures, fallbacks};
  count_graph_outcome(GraphSet::Outcome::eager, counters);
  EXPECT_EQ(replays + captures + fallbacks, 0);
  count_graph_outcome(GraphSet::Outcome::captured, counters);  // captured, then launched
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(replays, 1);
  count_graph_outcome(GraphSet::Outcome::replayed, counters);
  EXPECT_EQ(replays, 2);
  count_graph_outcome(GraphSet::Outcome::fallback, counters);
  EXPECT_EQ(fallbacks, 1);
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(replays, 2);
}

TEST(GraphSet, EnqueueRefCallsTheCallableItself) {
  int calls = 0;
  auto work = [&calls] { ++calls; };
  const EnqueueRef ref(work);
  const EnqueueRef copy = ref;
  ref();
  copy();
  EXPECT_EQ(calls, 2);
  struct Counter {
    int n = 0;
    void operator()() { ++n; }
  } counter;
  EnqueueRef{counter}();
  EXPECT_EQ(counter.n, 1);  // the object passed, not a copy
}

TEST(GraphSet, CpuContextHasOneVariant) {
  Context ctx(Device::cpu());
  EXPECT_EQ(attention_graph_variant(ctx, AttentionGraphShape{17, 32, 8, 1, 64, 16}), 0);
  EXPECT_EQ(attention_graph_variant(ctx, AttentionGraphShape{1, 32, 8, 4, 4096, 16}), 0);
}

TEST(GraphSet, MovesAndClears) {
  Context ctx(Device::cpu());
  GraphSet a;
  int calls = 0;
  EXPECT_EQ(a.run(ctx, 0, {}, [&] { ++calls; }), GraphSet::Outcome::eager);
  GraphSet b = std::move(a);
  // The warm-up moved along: the next run tries a capture (which fails on the CPU).
  EXPECT_EQ(b.run(ctx, 0, {}, [&] { ++calls; }), GraphSet::Outcome::fallback);
  b.clear();
  EXPECT_EQ(b.n_graphs(), 0u);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace dspark
