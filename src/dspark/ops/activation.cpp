// Argument checks and device dispatch of the element-wise ops (contract: ops/activation.h).
#include "dspark/ops/activation.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

// Checks that a, b and out are float tensors of one shape on the context's device and returns
// their [rows, cols] views.
struct Rows3 {
  Tensor a, b, out;
};
Rows3 elementwise_views(const char* op, Context& ctx, const char* a_name, const Tensor& a,
                        const char* b_name, const Tensor& b, const Tensor& out) {
  check_float(op, a_name, a);
  check_float(op, b_name, b);
  check_float(op, "out", out);
  check_shape(op, b_name, b, a.shape());
  check_shape(op, "out", out, a.shape());
  check_on_device(op, a_name, a, ctx);
  check_on_device(op, b_name, b, ctx);
  check_on_device(op, "out", out, ctx);
  return {as_rows(op, a_name, a), as_rows(op, b_name, b), as_rows(op, "out", out)};
}

}  // namespace

void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  constexpr const char* kOp = "swiglu";
  const Rows3 v = elementwise_views(kOp, ctx, "gate", gate, "up", up, out);
  if (v.a.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::swiglu(ctx, v.a, v.b, v.out));
  } else {
    cpu::swiglu(ctx, v.a, v.b, v.out);
  }
}

void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr const char* kOp = "add";
  const Rows3 v = elementwise_views(kOp, ctx, "a", a, "b", b, out);
  if (v.a.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::add(ctx, v.a, v.b, v.out));
  } else {
    cpu::add(ctx, v.a, v.b, v.out);
  }
}

void convert(Context& ctx, const Tensor& src, const Tensor& out) {
  constexpr const char* kOp = "convert";
  check_float(kOp, "src", src);
  check_float(kOp, "out", out);
  check_shape(kOp, "out", out, src.shape());
  check_on_device(kOp, "src", src, ctx);
  check_on_device(kOp, "out", out, ctx);
  const Tensor s = as_rows(kOp, "src", src), o = as_rows(kOp, "out", out);
  if (s.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::convert(ctx, s, o));
  } else {
    cpu::convert(ctx, s, o);
  }
}

}  // namespace dspark
