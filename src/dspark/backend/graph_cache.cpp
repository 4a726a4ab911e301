// The context-level part of graph keys (contract: backend/graph_cache.h).
#include "dspark/backend/graph_cache.h"

#include "dspark/backend/cuda/blas.h"

namespace dspark {

GraphContext graph_context(const Context& ctx) {
  return GraphContext{&ctx, ctx.is_cuda() ? ctx.blas().workspace() : nullptr};
}

}  // namespace dspark
