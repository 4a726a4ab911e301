// The CUDA side of the graph module (backend/graph_set.h): the RAII owner of a captured graph,
// stream capture with clean failure, and the launch-shape facts a graph key needs. No CUDA
// includes (handles are opaque). In a build without CUDA everything throws
// ErrorKind::unsupported (graph_stub.cpp). Model and drafter code uses backend/graph_set.h and
// backend/graph_cache.h instead.
//
// Capture rules for the work enqueued inside capture(): no synchronisation, no allocation through
// Context::scratch growth (Context::set_capturing makes that an error), no copies from pageable
// memory; every per-step value a kernel needs must be read from device memory that is rewritten
// (one copy) before each replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "dspark/backend/context.h"

namespace dspark::cuda {

// An instantiated CUDA graph (cudaGraphExec_t), launched on a context's stream.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  bool valid() const { return exec_ != nullptr; }
  size_t n_nodes() const { return n_nodes_; }
  // Enqueues one replay on ctx's stream (asynchronous).
  void launch(const Context& ctx) const;

  // Captures the work `enqueue` puts on ctx's stream (nothing runs) and instantiates it. While
  // it runs ctx.capturing() is true. If `enqueue` throws or the capture is invalidated (an
  // operation that cannot be captured), the capture is ended, the stream is usable again, the
  // sticky-free CUDA error state is cleared and the error is rethrown.
  static Graph capture(Context& ctx, const std::function<void()>& enqueue);

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
  size_t n_nodes_ = 0;
};

}  // namespace dspark::cuda
