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

}  // namespace dspark
