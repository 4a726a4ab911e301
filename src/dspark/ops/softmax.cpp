// Argument checks and device dispatch of softmax, log_softmax and argmax (contract:
// ops/softmax.h).
#include "dspark/ops/softmax.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

void check_softmax_args(const char* op, Context& ctx, const Tensor& x, const Tensor& out) {
  check_rank(op, "x", x, 2);
  check_float(op, "x", x);
  check_rows_contiguous(op, "x", x);
  check_dtype(op, "out", out, DType::f32);
  check_shape(op, "out", out, x.shape());
  check_rows_contiguous(op, "out", out);
  check_on_device(op, "x", x, ctx);
  check_on_device(op, "out", out, ctx);
}

}  // namespace

void softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  check_softmax_args("softmax", ctx, x, out);
  if (x.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::softmax(ctx, x, out));
  } else {
    cpu::softmax(ctx, x, out);
  }
}

void log_softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  check_softmax_args("log_softmax", ctx, x, out);
  if (x.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::log_softmax(ctx, x, out));
  } else {
    cpu::log_softmax(ctx, x, out);
  }
}

void argmax(Context& ctx, const Tensor& x, const Tensor& out, const Tensor& index_map) {
  constexpr const char* kOp = "argmax";
  check_rank(kOp, "x", x, 2);
  check_float(kOp, "x", x);
  check_rows_contiguous(kOp, "x", x);
  DSPARK_CHECK(x.size(1) > 0 || x.size(0) == 0, "{}: rows must not be empty", kOp);
  check_vector(kOp, "out", out, DType::i32, x.size(0));
  check_on_device(kOp, "x", x, ctx);
  check_on_device(kOp, "out", out, ctx);
  if (index_map.defined()) {
    check_vector(kOp, "index_map", index_map, DType::i32, x.size(1));
    check_on_device(kOp, "index_map", index_map, ctx);
  }
  if (x.size(0) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::argmax(ctx, x, out, index_map));
  } else {
    cpu::argmax(ctx, x, out, index_map);
  }
}

}  // namespace dspark
