#include "dspark/ops/qkv_prologue.h"

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

// Heads [first, first + heads) of a [n, width] buffer seen as [n, heads, head_dim].
Tensor heads_of(const Tensor& t, int first, int heads, int head_dim) {
  const int64_t col = static_cast<int64_t>(first) * head_dim;
  return Tensor(static_cast<char*>(t.data()) + col * static_cast<int64_t>(t.element_size()),
                t.dtype(), Shape{t.size(0), heads, head_dim}, Shape{t.stride(0), head_dim, 1},
                t.device());
}

// The definition: per-head norm into q_out / k_tmp (when there is one), RoPE (in place in qkv when
// there is no norm: no copy), then kv_write of k and v. Returns q.
Tensor unfused(Context& ctx, const QkvPrologueArgs& a) {
  const int64_t n = a.qkv.size(0);
  const int hd = a.head_dim;
  auto prepare = [&](int first, int heads, const Tensor& norm_w, const Tensor& dst) {
    Tensor h3 = heads_of(a.qkv, first, heads, hd);
    if (norm_w.defined()) {
      const int64_t col = static_cast<int64_t>(first) * hd;
      convert(ctx, a.qkv.slice(1, col, col + static_cast<int64_t>(heads) * hd), dst);
      const Tensor flat = dst.reshape(Shape{n * heads, hd});
      rms_norm(ctx, flat, norm_w, flat, a.norm);
      h3 = dst.reshape(Shape{n, heads, hd});
    }
    rope(ctx, h3, a.positions, a.inv_freq, a.attention_scaling);
    return h3;
  };
  const Tensor q = a.n_heads > 0 ? prepare(0, a.n_heads, a.q_norm, a.q_out) : Tensor{};
  const Tensor k = prepare(a.n_heads, a.n_kv_heads, a.k_norm, a.k_tmp);
  kv_write(ctx, k, heads_of(a.qkv, a.n_heads + a.n_kv_heads, a.n_kv_heads, hd), a.slots, a.k_pages,
           a.v_pages);
  return q;
}

}  // namespace

Tensor qkv_prologue(Context& ctx, const QkvPrologueArgs& a) {
  constexpr const char* kOp = "qkv_prologue";
  DSPARK_CHECK(a.n_heads >= 0 && a.n_kv_heads > 0 && a.head_dim > 0,
               "{}: heads ({}, {}) and head_dim ({}) must be positive (q heads: 0 or more)", kOp,
               a.n_heads, a.n_kv_heads, a.head_dim);
  check_rank(kOp, "qkv", a.qkv, 2);
  check_float(kOp, "qkv", a.qkv);
  check_rows_contiguous(kOp, "qkv", a.qkv);
  const int64_t n = a.qkv.size(0), hd = a.head_dim;
  check_shape(kOp, "qkv", a.qkv, Shape{n, (a.n_heads + 2 * int64_t{a.n_kv_heads}) * hd});
  const bool has_q = a.n_heads > 0;  // else K/V only: q_out unused
  if (has_q) {
    check_dtype(kOp, "q_out", a.q_out, a.qkv.dtype());
    check_shape(kOp, "q_out", a.q_out, Shape{n, a.n_heads * hd});
    check_contiguous(kOp, "q_out", a.q_out);
  }
  check_dtype(kOp, "k_tmp", a.k_tmp, a.qkv.dtype());
  check_shape(kOp, "k_tmp", a.k_tmp, Shape{n, a.n_kv_heads * hd});
  check_contiguous(kOp, "k_tmp", a.k_tmp);
  for (const Tensor* w : {&a.q_norm, &a.k_norm}) {
    if (!w->defined()) continue;
    check_float(kOp, "q_norm/k_norm", *w);
    check_shape(kOp, "q_norm/k_norm", *w, Shape{hd});
  }
  check_vector(kOp, "positions", a.positions, DType::i32, n);
  check_vector(kOp, "inv_freq", a.inv_freq, DType::f32, -1);
  check_vector(kOp, "slots", a.slots, DType::i32, n);
  for (const Tensor* t : {&a.qkv, &a.k_tmp, &a.positions, &a.inv_freq, &a.slots})
    check_on_device(kOp, "argument", *t, ctx);
  if (has_q) check_on_device(kOp, "q_out", a.q_out, ctx);
  const Tensor q_view = has_q ? a.q_out.reshape(Shape{n, a.n_heads, hd}) : Tensor{};
  if (n == 0) return q_view;
  const bool fusable = (hd == 64 || hd == 128 || hd == 256) && 2 * a.inv_freq.numel() == hd &&
                       a.k_pages.dim() == 4 && a.k_pages.size(2) == a.n_kv_heads &&
                       a.k_pages.size(3) == hd && a.k_pages.is_contiguous() &&
                       a.v_pages.is_contiguous() && a.v_pages.dtype() == a.k_pages.dtype() &&
                       a.v_pages.shape() == a.k_pages.shape();
  if (ctx.is_cuda() && fusable) {
    check_on_device(kOp, "k_pages", a.k_pages, ctx);
    check_on_device(kOp, "v_pages", a.v_pages, ctx);
    DSPARK_ON_CUDA(cuda::qkv_prologue(ctx, a));
    return q_view;
  }
  return unfused(ctx, a);
}

}  // namespace dspark
