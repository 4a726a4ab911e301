// CUDA graphs in a build without CUDA: nothing to capture (contract: backend/cuda/graph.h), and
// every context is a CPU one (attention_graph_variant, backend/graph_set.h).
#include "dspark/backend/cuda/graph.h"
#include "dspark/backend/graph_set.h"
#include "dspark/core/error.h"

namespace dspark::cuda {
namespace {
[[noreturn]] void no_cuda_graphs() {
  DSPARK_FAIL(unsupported, "dspark was built without CUDA");
}
}  // namespace

Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept {}
Graph& Graph::operator=(Graph&&) noexcept {
  return *this;
}
void Graph::launch(const Context&) const {
  no_cuda_graphs();
}
Graph Graph::capture(Context&, const std::function<void()>&) {
  no_cuda_graphs();
}

}  // namespace dspark::cuda

namespace dspark {

int attention_graph_variant(const Context&, const AttentionGraphShape&) {
  return 0;
}

}  // namespace dspark
