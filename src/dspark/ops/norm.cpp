// Argument checks and device dispatch of the RMSNorm and LayerNorm ops (contract: ops/norm.h).
#include "dspark/ops/norm.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

void check_weight(const char* op, const Tensor& weight, int64_t d) {
  check_rank(op, "weight", weight, 1);
  check_float(op, "weight", weight);
  check_shape(op, "weight", weight, Shape{d});
  DSPARK_CHECK(d <= 1 || weight.stride(0) == 1, "{}: weight must be contiguous", op);
}

void check_params(const char* op, const RmsNormParams& params) {
  DSPARK_CHECK(params.eps >= 0.0f, "{}: eps must be >= 0, got {}", op, params.eps);
}

}  // namespace

void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params) {
  constexpr const char* kOp = "rms_norm";
  DSPARK_CHECK(x.dim() == 2 || x.dim() == 3, "{}: x must be [n, D] or [n, heads, D], got {}", kOp,
               x.describe());
  check_float(kOp, "x", x);
  check_float(kOp, "out", out);
  check_shape(kOp, "out", out, x.shape());
  check_rows_contiguous(kOp, "x", x);
  check_rows_contiguous(kOp, "out", out);
  check_weight(kOp, weight, x.size(-1));
  check_params(kOp, params);
  for (const Tensor* t : {&x, &weight, &out}) check_on_device(kOp, "tensor", *t, ctx);
  if (x.numel() == 0) return;
  // Kernels take [n, D] views. A [n, heads, D] view whose dims do not collapse (per-head norms of a
  // slice of a fused projection) goes head by head, each head a strided [n, D] view.
  auto run = [&](const Tensor& x2, const Tensor& out2) {
    if (ctx.is_cuda()) {
      DSPARK_ON_CUDA(cuda::rms_norm(ctx, x2, weight, out2, params));
    } else {
      cpu::rms_norm(ctx, x2, weight, out2, params);
    }
  };
  auto collapsible = [](const Tensor& t) {
    return t.dim() == 2 || t.size(0) == 1 || t.size(1) == 1 ||
           t.stride(0) == t.stride(1) * t.size(1);
  };
  if (collapsible(x) && collapsible(out)) {
    run(as_rows(kOp, "x", x), as_rows(kOp, "out", out));
    return;
  }
  for (int64_t h = 0; h < x.size(1); ++h) run(x.select(1, h), out.select(1, h));
}

void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& out, float eps) {
  constexpr const char* kOp = "layer_norm";
  check_rank(kOp, "x", x, 2);
  check_float(kOp, "x", x);
  check_float(kOp, "out", out);
  check_shape(kOp, "out", out, x.shape());
  check_rows_contiguous(kOp, "x", x);
  check_rows_contiguous(kOp, "out", out);
  check_weight(kOp, weight, x.size(1));
  check_weight(kOp, bias, x.size(1));
  DSPARK_CHECK(eps >= 0.0f, "{}: eps must be >= 0, got {}", kOp, eps);
  for (const Tensor* t : {&x, &weight, &bias, &out}) check_on_device(kOp, "tensor", *t, ctx);
  if (x.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::layer_norm(ctx, x, weight, bias, out, eps));
  } else {
    cpu::layer_norm(ctx, x, weight, bias, out, eps);
  }
}

namespace ops_internal {

void check_add_rms_norm_args(const Context& ctx, const Tensor& residual, const Tensor& x,
                             const Tensor& weight, const Tensor& out, const RmsNormParams& params) {
  constexpr const char* kOp = "add_rms_norm";
  check_rank(kOp, "residual", residual, 2);
  check_float(kOp, "residual", residual);
  check_float(kOp, "x", x);
  check_float(kOp, "out", out);
  check_shape(kOp, "x", x, residual.shape());
  check_shape(kOp, "out", out, residual.shape());
  for (const auto& [name, t] : {std::pair{"residual", &residual}, {"x", &x}, {"out", &out}})
    check_rows_contiguous(kOp, name, *t);
  DSPARK_CHECK(out.data() != residual.data() || out.numel() == 0, "{}: out must not alias residual",
               kOp);
  check_weight(kOp, weight, residual.size(1));
  check_params(kOp, params);
  for (const Tensor* t : {&residual, &x, &weight, &out}) check_on_device(kOp, "tensor", *t, ctx);
}

}  // namespace ops_internal

void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params) {
  check_add_rms_norm_args(ctx, residual, x, weight, out, params);
  if (residual.numel() == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::add_rms_norm(ctx, residual, x, weight, out, params));
  } else {
    cpu::add_rms_norm(ctx, residual, x, weight, out, params);
  }
}

}  // namespace dspark
