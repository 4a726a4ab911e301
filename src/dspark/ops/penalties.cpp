// Argument checks and the device dispatch of apply_penalties (contract: ops/penalties.h).
#include "dspark/ops/penalties.h"

#include <cmath>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void apply_penalties(Context& ctx, const Tensor& logits, std::span<const PenaltyEntry> entries) {
  constexpr const char* kOp = "apply_penalties";
  check_rank(kOp, "logits", logits, 2);
  check_dtype(kOp, "logits", logits, DType::f32);
  check_rows_contiguous(kOp, "logits", logits);
  check_on_device(kOp, "logits", logits, ctx);
  const int64_t n = logits.size(0), v = logits.size(1);
  for (const PenaltyEntry& e : entries) {
    DSPARK_CHECK(e.row >= 0 && e.row < n && e.token >= 0 && e.token < v,
                 "{}: entry ({}, {}) outside the logits [{}, {}]", kOp, e.row, e.token, n, v);
    DSPARK_CHECK(std::isfinite(e.repetition) && e.repetition > 0 &&
                     (std::isfinite(e.subtract) || e.subtract == INFINITY),
                 "{}: invalid factors (repetition {}, subtract {})", kOp, e.repetition, e.subtract);
  }
  if (entries.empty()) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::apply_penalties(ctx, logits, entries));
  } else {
    cpu::apply_penalties(ctx, logits, entries);
  }
}

}  // namespace dspark
