// Argument checks and device dispatch of linear_add_rms_norm (contract: ops/linear_norm.h).
#include "dspark/ops/linear_norm.h"

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params, const LinearNormExtras& extras) {
  const Tensor& copy = extras.residual_copy;
  if (copy.defined()) {
    constexpr const char* kOp = "linear_add_rms_norm";
    check_float(kOp, "residual_copy", copy);
    check_shape(kOp, "residual_copy", copy, residual.shape());
    check_rows_contiguous(kOp, "residual_copy", copy);
    check_on_device(kOp, "residual_copy", copy, ctx);
    DSPARK_CHECK(copy.data() != residual.data() || copy.numel() == 0,
                 "{}: residual_copy must not alias residual", kOp);
  }
  if (!ctx.is_cuda()) {  // the two ops (each checks its arguments), then the copy
    linear(ctx, x, w, Tensor{}, y);
    add_rms_norm(ctx, residual, y, weight, out, params);
    if (copy.defined()) convert(ctx, residual, copy);
    return;
  }
  check_linear_args(ctx, x, w, Tensor{}, y);
  check_add_rms_norm_args(ctx, residual, y, weight, out, params);
  if (residual.numel() == 0) return;
  DSPARK_ON_CUDA(cuda::linear_add_rms_norm(ctx, x, w, y, residual, weight, out, params, extras));
}

}  // namespace dspark
