// CUDA graphs in a build without CUDA: nothing to capture (contract: backend/cuda/graph.h).
#include <cstdlib>
#include <cstring>

#include "dspark/backend/cuda/graph.h"
#include "dspark/core/error.h"

namespace dspark::cuda {
namespace {
[[noreturn]] void no_cuda() {
  DSPARK_FAIL(unsupported, "dspark was built without CUDA");
}
}  // namespace

bool graphs_enabled_by_env() {
  const char* env = std::getenv("DSPARK_CUDA_GRAPHS");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept {}
Graph& Graph::operator=(Graph&&) noexcept {
  return *this;
}
void Graph::launch(const Context&) const {
  no_cuda();
}
Graph Graph::capture(Context&, const std::function<void()>&) {
  no_cuda();
}

PinnedBuffer::PinnedBuffer(size_t) {
  no_cuda();
}
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept {
  return *this;
}

CopyFence::~CopyFence() = default;
CopyFence::CopyFence(CopyFence&&) noexcept {}
CopyFence& CopyFence::operator=(CopyFence&&) noexcept {
  return *this;
}
void CopyFence::record(const Context&) {
  no_cuda();
}
void CopyFence::wait() const {
  no_cuda();
}

int paged_attention_splits(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) {
  no_cuda();
}

}  // namespace dspark::cuda
