// Argument checks and device dispatch of mla_prologue (contract: ops/mla_prologue.h).
#include "dspark/ops/mla_prologue.h"

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/attention.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/op_checks.h"
#include "dspark/ops/rope.h"

namespace dspark {

using namespace ops_internal;

namespace {

// The definition: the unfused ops, in the order model/mla.h describes.
void unfused(Context& ctx, const MlaPrologueArgs& a) {
  const int64_t n = a.kv.size(0), r = a.kv_norm.size(0), lat = a.kv.size(1);
  rms_norm(ctx, a.kv.slice(1, 0, r), a.kv_norm, a.latent.slice(1, 0, r),
           RmsNormParams{a.eps, false});
  convert(ctx, a.kv.slice(1, r, lat), a.latent.slice(1, r, lat));
  const Tensor latent3 = a.latent.reshape(Shape{n, 1, lat});
  rope(ctx, latent3.slice(2, r, lat), a.positions, a.inv_freq, a.attention_scaling);
  kv_write(ctx, latent3, latent3, a.slots, a.pages, a.pages);
  // The heads of q_rope (q_proj's columns of a wider input projection) or of q_out may not
  // collapse into rows of one stride: then one copy per head.
  const int64_t heads = a.q_rope.size(1);
  auto rows = [heads](const Tensor& t) { return heads == 1 || t.stride(0) == heads * t.stride(1); };
  if (rows(a.q_rope) && rows(a.q_out)) {
    convert(ctx, a.q_rope, a.q_out);
  } else {
    for (int64_t h = 0; h < heads; ++h) convert(ctx, a.q_rope.select(1, h), a.q_out.select(1, h));
  }
  rope(ctx, a.q_out, a.positions, a.inv_freq, a.attention_scaling);
}

}  // namespace

void mla_prologue(Context& ctx, const MlaPrologueArgs& a) {
  constexpr const char* kOp = "mla_prologue";
  check_rank(kOp, "kv", a.kv, 2);
  check_float(kOp, "kv", a.kv);
  check_rows_contiguous(kOp, "kv", a.kv);
  check_float(kOp, "kv_norm", a.kv_norm);
  check_vector(kOp, "kv_norm", a.kv_norm, a.kv_norm.dtype(), -1);
  const int64_t n = a.kv.size(0), r = a.kv_norm.size(0), lat = a.kv.size(1), rope_dim = lat - r;
  DSPARK_CHECK(r > 0 && rope_dim > 0 && rope_dim % 2 == 0,
               "{}: kv has {} columns for a latent of {}: the rotated part must be even and "
               "positive",
               kOp, lat, r);
  check_rank(kOp, "q_rope", a.q_rope, 3);
  check_dtype(kOp, "q_rope", a.q_rope, a.kv.dtype());
  check_rows_contiguous(kOp, "q_rope", a.q_rope);
  const int64_t heads = a.q_rope.size(1);
  check_shape(kOp, "q_rope", a.q_rope, Shape{n, heads, rope_dim});
  check_dtype(kOp, "q_out", a.q_out, a.kv.dtype());
  check_shape(kOp, "q_out", a.q_out, a.q_rope.shape());
  check_rows_contiguous(kOp, "q_out", a.q_out);
  check_dtype(kOp, "latent", a.latent, a.kv.dtype());
  check_shape(kOp, "latent", a.latent, Shape{n, lat});
  check_contiguous(kOp, "latent", a.latent);
  check_vector(kOp, "positions", a.positions, DType::i32, n);
  check_vector(kOp, "inv_freq", a.inv_freq, DType::f32, -1);
  check_vector(kOp, "slots", a.slots, DType::i32, n);
  check_rank(kOp, "pages", a.pages, 4);
  check_float(kOp, "pages", a.pages);
  DSPARK_CHECK(a.pages.size(2) == 1 && a.pages.size(3) == lat,
               "{}: pages must hold one row of {} per slot, got {}", kOp, lat, a.pages.describe());
  for (const Tensor* t : {&a.kv, &a.kv_norm, &a.q_rope, &a.q_out, &a.latent, &a.positions,
                          &a.inv_freq, &a.slots, &a.pages})
    check_on_device(kOp, "argument", *t, ctx);
  if (n == 0) return;
  const bool fusable =
      2 * a.inv_freq.numel() == rope_dim && rope_dim <= 256 && a.pages.is_contiguous();
  if (ctx.is_cuda() && fusable) {
    DSPARK_ON_CUDA(cuda::mla_prologue(ctx, a));
    return;
  }
  unfused(ctx, a);
}

}  // namespace dspark
