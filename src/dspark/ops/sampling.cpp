// Sampling parameter validation and the argument checks and device dispatch of the sampling ops
// (contract: ops/sampling.h).
#include "dspark/ops/sampling.h"

#include <cmath>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void validate(const SamplingParams& params, int64_t vocab_size) {
  DSPARK_CHECK_KIND(invalid_input, vocab_size > 0, "sampling: vocabulary size must be > 0, got {}",
                    vocab_size);
  DSPARK_CHECK_KIND(invalid_input, std::isfinite(params.temperature) && params.temperature >= 0.0f,
                    "temperature must be a finite number >= 0, got {}", params.temperature);
  DSPARK_CHECK_KIND(invalid_input, params.top_k >= 0, "top_k must be >= 0 (0 = off), got {}",
                    params.top_k);
  DSPARK_CHECK_KIND(invalid_input, params.top_p > 0.0f && params.top_p <= 1.0f,
                    "top_p must be in (0, 1], got {}", params.top_p);
  DSPARK_CHECK_KIND(invalid_input, params.min_p >= 0.0f && params.min_p <= 1.0f,
                    "min_p must be in [0, 1], got {}", params.min_p);
}

namespace {

void check_logits(const char* op, Context& ctx, const Tensor& logits,
                  std::span<const SamplingParams> params) {
  check_rank(op, "logits", logits, 2);
  check_float(op, "logits", logits);
  check_rows_contiguous(op, "logits", logits);
  check_on_device(op, "logits", logits, ctx);
  check_per_row(op, "params", params, logits.size(0), /*allow_one=*/true);
  DSPARK_CHECK(logits.size(1) > 0 || logits.size(0) == 0, "{}: logits rows must not be empty", op);
  for (const SamplingParams& p : params) validate(p, logits.size(1));
}

}  // namespace

void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs) {
  constexpr const char* kOp = "process_logits";
  check_logits(kOp, ctx, logits, params);
  check_dtype(kOp, "probs", probs, DType::f32);
  check_shape(kOp, "probs", probs, logits.shape());
  check_rows_contiguous(kOp, "probs", probs);
  check_on_device(kOp, "probs", probs, ctx);
  if (logits.size(0) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::process_logits(ctx, logits, params, probs));
  } else {
    cpu::process_logits(ctx, logits, params, probs);
  }
}

void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens) {
  constexpr const char* kOp = "sample";
  check_logits(kOp, ctx, logits, params);
  const int64_t n = logits.size(0);
  check_per_row(kOp, "seeds", seeds, n, /*allow_one=*/false);
  check_per_row(kOp, "counters", counters, n, /*allow_one=*/false);
  check_vector(kOp, "tokens", tokens, DType::i32, n);
  check_on_device(kOp, "tokens", tokens, ctx);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::sample(ctx, logits, params, seeds, counters, tokens));
  } else {
    cpu::sample(ctx, logits, params, seeds, counters, tokens);
  }
}

void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens) {
  constexpr const char* kOp = "sample_from_probs";
  check_rank(kOp, "probs", probs, 2);
  check_dtype(kOp, "probs", probs, DType::f32);
  check_rows_contiguous(kOp, "probs", probs);
  const int64_t n = probs.size(0);
  DSPARK_CHECK(probs.size(1) > 0 || n == 0, "{}: probs rows must not be empty", kOp);
  check_vector(kOp, "uniforms", uniforms, DType::f32, n);
  check_vector(kOp, "tokens", tokens, DType::i32, n);
  for (const Tensor* t : {&probs, &uniforms, &tokens}) check_on_device(kOp, "tensor", *t, ctx);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::sample_from_probs(ctx, probs, uniforms, tokens));
  } else {
    cpu::sample_from_probs(ctx, probs, uniforms, tokens);
  }
}

}  // namespace dspark
