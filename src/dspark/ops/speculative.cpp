#include "dspark/ops/speculative.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"

namespace dspark {

void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& modes, const Tensor& n_accepted, const Tensor& next_token) {
  constexpr const char* kOp = "speculative_accept";
  check_rank(kOp, "p", p, 2);
  check_dtype(kOp, "p", p, DType::f32);
  check_contiguous(kOp, "p", p);
  check_rank(kOp, "draft_indptr", draft_indptr, 1);
  check_dtype(kOp, "draft_indptr", draft_indptr, DType::i32);
  const int64_t n = draft_indptr.size(0) - 1;
  DSPARK_CHECK(n >= 0, "{}: draft_indptr must have n + 1 entries", kOp);
  const int64_t n_drafts = draft_tokens.dim() == 1 ? draft_tokens.size(0) : -1;
  check_dtype(kOp, "draft_tokens", draft_tokens, DType::i32);
  DSPARK_CHECK(n_drafts >= 0, "{}: draft_tokens must be 1-D, got {}", kOp, draft_tokens.describe());
  DSPARK_CHECK(p.size(0) == n_drafts + n, "{}: p has {} rows, expected drafts + rows = {}", kOp,
               p.size(0), n_drafts + n);
  if (q.defined()) {
    check_dtype(kOp, "q", q, DType::f32);
    check_contiguous(kOp, "q", q);
    check_shape(kOp, "q", q, Shape{n_drafts, p.size(1)});
    check_same_device(kOp, p, q);
  }
  check_shape(kOp, "seeds", seeds, Shape{n});
  check_dtype(kOp, "seeds", seeds, DType::i64);
  check_shape(kOp, "positions", positions, Shape{n});
  check_dtype(kOp, "positions", positions, DType::i32);
  check_shape(kOp, "modes", modes, Shape{n});
  check_dtype(kOp, "modes", modes, DType::i32);
  check_shape(kOp, "n_accepted", n_accepted, Shape{n});
  check_dtype(kOp, "n_accepted", n_accepted, DType::i32);
  check_shape(kOp, "next_token", next_token, Shape{n});
  check_dtype(kOp, "next_token", next_token, DType::i32);
  for (const Tensor* t :
       {&draft_tokens, &draft_indptr, &seeds, &positions, &modes, &n_accepted, &next_token}) {
    check_same_device(kOp, p, *t);
    check_contiguous(kOp, "index tensor", *t);
  }
  DSPARK_CHECK(p.device() == ctx.device(), "{}: tensors on {}, context on {}", kOp,
               p.device().name(), ctx.device().name());
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::speculative_accept(ctx, p, q, draft_tokens, draft_indptr, seeds, positions,
                                            modes, n_accepted, next_token));
  } else {
    cpu::speculative_accept(ctx, p, q, draft_tokens, draft_indptr, seeds, positions, modes,
                            n_accepted, next_token);
  }
}

}  // namespace dspark
