// CUDA graphs (contract: backend/cuda/graph.h) and the graph module's CUDA answer for keys
// (attention_graph_variant, backend/graph_set.h).
#include "dspark/backend/cuda/graph.h"

#include <utility>

#include "dspark/backend/cuda/check.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/graph_set.h"

namespace dspark::cuda {
namespace {

cudaStream_t stream_of(const Context& ctx) {
  return static_cast<cudaStream_t>(ctx.cuda_stream());
}

// ctx.capturing() for the lifetime of the guard.
class CapturingGuard {
 public:
  explicit CapturingGuard(Context& ctx) : ctx_(ctx) { ctx_.set_capturing(true); }
  ~CapturingGuard() { ctx_.set_capturing(false); }
  CapturingGuard(const CapturingGuard&) = delete;
  CapturingGuard& operator=(const CapturingGuard&) = delete;

 private:
  Context& ctx_;
};

}  // namespace

// ---- Graph -----------------------------------------------------------------------------------

Graph::~Graph() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

Graph::Graph(Graph&& other) noexcept
    : exec_(std::exchange(other.exec_, nullptr)), n_nodes_(other.n_nodes_) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = std::exchange(other.exec_, nullptr);
    n_nodes_ = other.n_nodes_;
  }
  return *this;
}

void Graph::launch(const Context& ctx) const {
  DSPARK_CHECK(exec_ != nullptr, "Graph::launch: no graph");
  DSPARK_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream_of(ctx)));
}

Graph Graph::capture(Context& ctx, const std::function<void()>& enqueue) {
  DSPARK_CHECK(ctx.is_cuda(), "Graph::capture needs a CUDA context");
  const cudaStream_t stream = stream_of(ctx);
  cudaGraph_t graph = nullptr;
  {
    CapturingGuard guard(ctx);
    // Relaxed: host-side CUDA calls the launchers make (attribute queries, cudaFuncSetAttribute)
    // are allowed; anything that would synchronise the stream still invalidates the capture.
    DSPARK_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(stream, &partial);
      if (partial) (void)cudaGraphDestroy(partial);
      (void)cudaGetLastError();  // capture errors are not sticky: clear the last-error slot
      throw;
    }
    const cudaError_t err = cudaStreamEndCapture(stream, &graph);
    if (err != cudaSuccess) {
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      DSPARK_CUDA_CHECK(err);
    }
  }
  Graph out;
  size_t n_nodes = 0;
  (void)cudaGraphGetNodes(graph, nullptr, &n_nodes);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  DSPARK_CUDA_CHECK(err);
  out.exec_ = exec;
  out.n_nodes_ = n_nodes;
  DSPARK_CUDA_CHECK(cudaGraphUpload(exec, stream));  // first launch without the upload cost
  return out;
}

}  // namespace dspark::cuda

namespace dspark {

int attention_graph_variant(const Context& ctx, const AttentionGraphShape& s) {
  if (!ctx.is_cuda()) return 0;
  return cuda::paged_attention_splits(ctx, s.n_tokens, s.n_heads, s.n_kv_heads, s.n_rows,
                                      s.total_pages, s.page_size);
}

}  // namespace dspark
