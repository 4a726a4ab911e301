// Argument checks and the device dispatch of apply_token_mask (contract: ops/token_mask.h).
#include "dspark/ops/token_mask.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void apply_token_mask(Context& ctx, const Tensor& logits, std::span<const int32_t> rows,
                      std::span<const uint32_t> mask) {
  constexpr const char* kOp = "apply_token_mask";
  check_rank(kOp, "logits", logits, 2);
  check_dtype(kOp, "logits", logits, DType::f32);
  check_rows_contiguous(kOp, "logits", logits);
  check_on_device(kOp, "logits", logits, ctx);
  const int64_t n = logits.size(0), v = logits.size(1);
  DSPARK_CHECK(mask.size() == rows.size() * static_cast<size_t>(token_mask_words(v)),
               "{}: mask has {} words, {} rows of {} tokens need {}", kOp, mask.size(), rows.size(),
               v, rows.size() * static_cast<size_t>(token_mask_words(v)));
  for (const int32_t r : rows)
    DSPARK_CHECK(r >= 0 && r < n, "{}: row {} outside the logits [{}, {}]", kOp, r, n, v);
  if (rows.empty()) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::apply_token_mask(ctx, logits, rows, mask));
  } else {
    cpu::apply_token_mask(ctx, logits, rows, mask);
  }
}

}  // namespace dspark
