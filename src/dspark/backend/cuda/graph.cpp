// CUDA graphs (contract: backend/cuda/graph.h).
#include "dspark/backend/cuda/graph.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "dspark/backend/cuda/check.h"

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

bool graphs_enabled_by_env() {
  static const bool enabled = [] {
    const char* env = std::getenv("DSPARK_CUDA_GRAPHS");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return enabled;
}

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

// ---- PinnedBuffer ------------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) DSPARK_CUDA_CHECK(cudaMallocHost(&data_, bytes_));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) (void)cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) (void)cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- CopyFence ---------------------------------------------------------------------------------

CopyFence::~CopyFence() {
  if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

CopyFence::CopyFence(CopyFence&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CopyFence& CopyFence::operator=(CopyFence&& other) noexcept {
  if (this != &other) {
    if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CopyFence::record(const Context& ctx) {
  if (!event_) {
    cudaEvent_t e = nullptr;
    DSPARK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
  }
  DSPARK_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream_of(ctx)));
}

void CopyFence::wait() const {
  if (event_) DSPARK_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

}  // namespace dspark::cuda
