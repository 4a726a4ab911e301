// Argument checks and device dispatch of linear_add_rms_norm (contract: ops/linear_norm.h).
#include "dspark/ops/linear_norm.h"

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params) {
  if (!ctx.is_cuda()) {  // the two ops (each checks its arguments)
    linear(ctx, x, w, Tensor{}, y);
    add_rms_norm(ctx, residual, y, weight, out, params);
    return;
  }
  check_linear_args(ctx, x, w, Tensor{}, y);
  check_add_rms_norm_args(ctx, residual, y, weight, out, params);
  if (residual.numel() == 0) return;
  DSPARK_ON_CUDA(cuda::linear_add_rms_norm(ctx, x, w, y, residual, weight, out, params));
}

}  // namespace dspark
