// Argument checks and device dispatch of moe_route and moe_combine (contract: ops/moe.h).
#include "dspark/ops/moe.h"

#include <cmath>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

// A contiguous [n, k] tensor of `dtype` on ctx's device.
void check_choices(const char* op, const char* name, const Tensor& t, DType dtype, int64_t n,
                   int64_t k, const Context& ctx) {
  check_rank(op, name, t, 2);
  check_dtype(op, name, t, dtype);
  check_shape(op, name, t, Shape{n, k});
  DSPARK_CHECK(t.is_contiguous(), "{}: {} must be contiguous, got strides {}", op, name,
               t.strides().str());
  check_on_device(op, name, t, ctx);
}

// A 2-D float tensor with contiguous rows on ctx's device.
void check_float_rows(const char* op, const char* name, const Tensor& t, const Context& ctx) {
  check_rank(op, name, t, 2);
  check_float(op, name, t);
  check_rows_contiguous(op, name, t);
  check_on_device(op, name, t, ctx);
}

}  // namespace

void moe_route(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
               const Tensor& weights) {
  constexpr const char* kOp = "moe_route";
  check_float_rows(kOp, "logits", logits, ctx);
  check_rank(kOp, "ids", ids, 2);
  const int64_t n = logits.size(0), experts = logits.size(1), k = ids.size(1);
  DSPARK_CHECK(k >= 1 && k <= experts, "{}: top-k {} must be in [1, {}] (the number of experts)",
               kOp, k, experts);
  check_choices(kOp, "ids", ids, DType::i32, n, k, ctx);
  check_choices(kOp, "weights", weights, DType::f32, n, k, ctx);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::moe_route(ctx, logits, normalize, ids, weights));
  } else {
    cpu::moe_route(ctx, logits, normalize, ids, weights);
  }
}

void moe_route_grouped(Context& ctx, const Tensor& logits, const Tensor& bias,
                       const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights) {
  constexpr const char* kOp = "moe_route_grouped";
  check_float_rows(kOp, "logits", logits, ctx);
  check_rank(kOp, "ids", ids, 2);
  const int64_t n = logits.size(0), experts = logits.size(1), k = ids.size(1);
  check_vector(kOp, "bias", bias, DType::f32, experts);
  check_on_device(kOp, "bias", bias, ctx);
  DSPARK_CHECK(p.n_group >= 1 && experts % p.n_group == 0 && experts / p.n_group >= 2,
               "{}: n_group {} must divide the {} experts into groups of at least 2", kOp,
               p.n_group, experts);
  DSPARK_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group,
               "{}: topk_group {} must be in [1, n_group = {}]", kOp, p.topk_group, p.n_group);
  DSPARK_CHECK(k >= 1 && k <= p.topk_group * (experts / p.n_group),
               "{}: top-k {} must be in [1, {}] (the experts of topk_group groups)", kOp, k,
               p.topk_group * (experts / p.n_group));
  DSPARK_CHECK(std::isfinite(p.scale), "{}: scale must be finite, got {}", kOp, p.scale);
  check_choices(kOp, "ids", ids, DType::i32, n, k, ctx);
  check_choices(kOp, "weights", weights, DType::f32, n, k, ctx);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::moe_route_grouped(ctx, logits, bias, p, ids, weights));
  } else {
    cpu::moe_route_grouped(ctx, logits, bias, p, ids, weights);
  }
}

void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& slots, const Tensor& weights,
                 const Tensor& out) {
  constexpr const char* kOp = "moe_combine";
  check_float_rows(kOp, "expert_out", expert_out, ctx);
  check_float_rows(kOp, "out", out, ctx);
  check_rank(kOp, "slots", slots, 2);
  const int64_t n = out.size(0), k = slots.size(1);
  DSPARK_CHECK(out.size(1) == expert_out.size(1), "{}: out has {} columns, expert_out {}", kOp,
               out.size(1), expert_out.size(1));
  check_choices(kOp, "slots", slots, DType::i32, n, k, ctx);
  check_choices(kOp, "weights", weights, DType::f32, n, k, ctx);
  DSPARK_CHECK(k >= 1, "{}: at least one choice per row", kOp);
  DSPARK_CHECK(expert_out.size(0) > 0 || n == 0, "{}: expert_out has no rows", kOp);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::moe_combine(ctx, expert_out, slots, weights, out));
  } else {
    cpu::moe_combine(ctx, expert_out, slots, weights, out);
  }
}

}  // namespace dspark
