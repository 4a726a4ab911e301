// Argument checks and device dispatch of the DSpark head cells (contract: ops/head_cells.h).
#include "dspark/ops/head_cells.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void sigmoid_gate(Context& ctx, const Tensor& gate, const Tensor& x, const Tensor& out) {
  constexpr const char* kOp = "sigmoid_gate";
  for (const auto& [name, t] : {std::pair{"gate", &gate}, {"x", &x}, {"out", &out}}) {
    check_rank(kOp, name, *t, 2);
    check_float(kOp, name, *t);
    check_rows_contiguous(kOp, name, *t);
    check_on_device(kOp, name, *t, ctx);
  }
  check_shape(kOp, "x", x, gate.shape());
  check_shape(kOp, "out", out, gate.shape());
  if (gate.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::sigmoid_gate(ctx, gate, x, out));
  } else {
    cpu::sigmoid_gate(ctx, gate, x, out);
  }
}

void rnn_head_cell(Context& ctx, const Tensor& proj, const Tensor& state, const Tensor& out) {
  constexpr const char* kOp = "rnn_head_cell";
  for (const auto& [name, t] : {std::pair{"proj", &proj}, {"state", &state}, {"out", &out}}) {
    check_rank(kOp, name, *t, 2);
    check_float(kOp, name, *t);
    check_rows_contiguous(kOp, name, *t);
    check_on_device(kOp, name, *t, ctx);
  }
  const int64_t n = state.size(0), r = state.size(1);
  check_shape(kOp, "proj", proj, Shape{n, 3 * r});
  check_shape(kOp, "out", out, Shape{n, r});
  if (n == 0 || r == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::rnn_head_cell(ctx, proj, state, out));
  } else {
    cpu::rnn_head_cell(ctx, proj, state, out);
  }
}

namespace {

// The Markov head's tables against the logits z (f32 [n, C] rows contiguous), all on ctx's device:
// w1 [V, r], w2 [C, r], index_map i32 [C] or undefined.
void check_markov_tables(const char* op, const Tensor& w1, const Tensor& w2, const Tensor& z,
                         const Tensor& index_map, const Context& ctx) {
  check_rank(op, "w1", w1, 2);
  check_rank(op, "w2", w2, 2);
  check_float(op, "w1", w1);
  check_float(op, "w2", w2);
  check_rank(op, "z", z, 2);
  check_dtype(op, "z", z, DType::f32);
  check_rows_contiguous(op, "z", z);
  const int64_t cols = z.size(1);
  DSPARK_CHECK(w2.size(0) == cols && w2.size(1) == w1.size(1),
               "{}: w1 {} and w2 {} do not fit logits with {} columns", op, w1.shape().str(),
               w2.shape().str(), cols);
  for (const auto& [name, t] : {std::pair{"w1", &w1}, {"w2", &w2}, {"z", &z}})
    check_on_device(op, name, *t, ctx);
  if (index_map.defined()) {
    check_vector(op, "index_map", index_map, DType::i32, cols);
    check_on_device(op, "index_map", index_map, ctx);
  }
}

}  // namespace

bool markov_greedy_step(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& prev,
                        const Tensor& z, const Tensor& next, const Tensor& index_map) {
  constexpr const char* kOp = "markov_greedy_step";
  check_markov_tables(kOp, w1, w2, z, index_map, ctx);
  const int64_t n = z.size(0), cols = z.size(1);
  check_vector(kOp, "prev", prev, DType::i32, n);
  check_vector(kOp, "next", next, DType::i32, n);
  check_on_device(kOp, "prev", prev, ctx);
  check_on_device(kOp, "next", next, ctx);
  if (!ctx.is_cuda() || n == 0 || cols == 0) return false;
#if DSPARK_WITH_CUDA
  const OpProfileScope scope(ctx, "markov_greedy_step");
  return cuda::markov_greedy_step(ctx, w1, w2, prev, z, next, index_map);
#else
  return false;
#endif
}

bool markov_greedy_loop(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& tokens,
                        const Tensor& z, int64_t rows, int64_t steps, const Tensor& index_map) {
  constexpr const char* kOp = "markov_greedy_loop";
  check_markov_tables(kOp, w1, w2, z, index_map, ctx);
  DSPARK_CHECK(rows >= 0 && steps >= 0 && z.size(0) == rows * steps,
               "{}: logits {} are not {} steps x {} rows", kOp, z.shape().str(), steps, rows);
  const int64_t cols = z.size(1);
  check_vector(kOp, "tokens", tokens, DType::i32, (steps + 1) * rows);
  check_on_device(kOp, "tokens", tokens, ctx);
  if (!ctx.is_cuda() || rows == 0 || steps == 0 || cols == 0) return false;
#if DSPARK_WITH_CUDA
  const OpProfileScope scope(ctx, "markov_greedy_loop");
  return cuda::markov_greedy_loop(ctx, w1, w2, tokens, z, rows, steps, index_map);
#else
  return false;
#endif
}

}  // namespace dspark
