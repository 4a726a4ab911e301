// CUDA graphs seen from host code: RAII owners of a captured graph and of pinned host staging
// memory, stream capture with clean failure, and the launch-shape facts a graph key needs. No CUDA
// includes (handles are opaque). In a build without CUDA everything but graphs_enabled_by_env()
// throws ErrorKind::unsupported (graph_stub.cpp).
//
// Capture rules for the work enqueued inside capture(): no synchronisation, no allocation through
// Context::scratch growth (Context::set_capturing makes that an error), no copies from pageable
// memory; every per-step value a kernel needs must be read from device memory that is rewritten
// (one copy) before each replay. See docs/perf-notes.md ("CUDA graphs").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "dspark/backend/context.h"

namespace dspark::cuda {

// True when the environment asks for graphs: DSPARK_CUDA_GRAPHS=1 (read once).
bool graphs_enabled_by_env();

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

// Page-locked host memory: copies from it with Context::copy_async are truly asynchronous (the
// caller must not rewrite it before the copy has run: see CopyFence).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// An event recorded after an asynchronous copy from pinned memory; wait() blocks the host until
// that copy has run (immediately when it already has, the usual case one step later).
class CopyFence {
 public:
  CopyFence() = default;
  ~CopyFence();
  CopyFence(CopyFence&& other) noexcept;
  CopyFence& operator=(CopyFence&& other) noexcept;
  CopyFence(const CopyFence&) = delete;
  CopyFence& operator=(const CopyFence&) = delete;

  void record(const Context& ctx);
  void wait() const;

 private:
  void* event_ = nullptr;  // cudaEvent_t, created on first record()
};

// The number of key splits (grid.z) paged_attention picks for this launch shape: the graph of a
// forward is only bitwise equal to the eager forward when it was captured with the same count.
// `total_pages` is page_indices.numel() of the batch.
int paged_attention_splits(int64_t n_tokens, int64_t n_heads, int64_t n_kv_heads, int64_t n_rows,
                           int64_t total_pages, int64_t page_size);

}  // namespace dspark::cuda
