// Argument checks and device dispatch of the MoE ops (contract: ops/moe.h).
#include "dspark/ops/moe.h"

#include <cmath>
#include <vector>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"
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

namespace {

void check_route(const char* op, const Tensor& logits, const Tensor& ids, const Tensor& weights,
                 const Context& ctx) {
  check_float_rows(op, "logits", logits, ctx);
  check_rank(op, "ids", ids, 2);
  const int64_t n = logits.size(0), experts = logits.size(1), k = ids.size(1);
  DSPARK_CHECK(k >= 1 && k <= experts, "{}: top-k {} must be in [1, {}] (the number of experts)",
               op, k, experts);
  check_choices(op, "ids", ids, DType::i32, n, k, ctx);
  check_choices(op, "weights", weights, DType::f32, n, k, ctx);
}

void check_route_grouped(const char* op, const Tensor& logits, const Tensor& bias,
                         const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights,
                         const Context& ctx) {
  check_float_rows(op, "logits", logits, ctx);
  check_rank(op, "ids", ids, 2);
  const int64_t n = logits.size(0), experts = logits.size(1), k = ids.size(1);
  check_vector(op, "bias", bias, DType::f32, experts);
  check_on_device(op, "bias", bias, ctx);
  DSPARK_CHECK(p.n_group >= 1 && experts % p.n_group == 0 && experts / p.n_group >= 2,
               "{}: n_group {} must divide the {} experts into groups of at least 2", op, p.n_group,
               experts);
  DSPARK_CHECK(p.topk_group >= 1 && p.topk_group <= p.n_group,
               "{}: topk_group {} must be in [1, n_group = {}]", op, p.topk_group, p.n_group);
  DSPARK_CHECK(k >= 1 && k <= p.topk_group * (experts / p.n_group),
               "{}: top-k {} must be in [1, {}] (the experts of topk_group groups)", op, k,
               p.topk_group * (experts / p.n_group));
  DSPARK_CHECK(std::isfinite(p.scale), "{}: scale must be finite, got {}", op, p.scale);
  check_choices(op, "ids", ids, DType::i32, n, k, ctx);
  check_choices(op, "weights", weights, DType::f32, n, k, ctx);
}

void check_grouping(const char* op, const Tensor& ids, const MoeGroups& g, const Context& ctx);

}  // namespace

void moe_route(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
               const Tensor& weights) {
  check_route("moe_route", logits, ids, weights, ctx);
  if (logits.size(0) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::moe_route(ctx, logits, normalize, ids, weights));
  } else {
    cpu::moe_route(ctx, logits, normalize, ids, weights);
  }
}

void moe_route_grouped(Context& ctx, const Tensor& logits, const Tensor& bias,
                       const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights) {
  check_route_grouped("moe_route_grouped", logits, bias, p, ids, weights, ctx);
  if (logits.size(0) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::moe_route_grouped(ctx, logits, bias, p, ids, weights));
  } else {
    cpu::moe_route_grouped(ctx, logits, bias, p, ids, weights);
  }
}

void moe_route_and_group(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
                         const Tensor& weights, const MoeGroups& g) {
  if (!ctx.is_cuda() || logits.size(0) == 0) {
    moe_route(ctx, logits, normalize, ids, weights);
    moe_group(ctx, ids, g);
    return;
  }
  check_route("moe_route", logits, ids, weights, ctx);
  check_grouping("moe_group", ids, g, ctx);
  DSPARK_ON_CUDA(cuda::moe_route_and_group(ctx, logits, normalize, ids, weights, g));
}

void moe_route_grouped_and_group(Context& ctx, const Tensor& logits, const Tensor& bias,
                                 const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights,
                                 const MoeGroups& g) {
  if (!ctx.is_cuda() || logits.size(0) == 0) {
    moe_route_grouped(ctx, logits, bias, p, ids, weights);
    moe_group(ctx, ids, g);
    return;
  }
  check_route_grouped("moe_route_grouped", logits, bias, p, ids, weights, ctx);
  check_grouping("moe_group", ids, g, ctx);
  DSPARK_ON_CUDA(cuda::moe_route_grouped_and_group(ctx, logits, bias, p, ids, weights, g));
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

namespace {

// A contiguous i32 vector of `n` entries on ctx's device.
void check_index_vector(const char* op, const char* name, const Tensor& t, int64_t n,
                        const Context& ctx) {
  check_vector(op, name, t, DType::i32, n);
  DSPARK_CHECK(t.is_contiguous(), "{}: {} must be contiguous", op, name);
  check_on_device(op, name, t, ctx);
}

// The grouping's tensors for E experts and m (token, choice) pairs.
void check_groups(const char* op, const MoeGroups& g, int64_t m, const Context& ctx) {
  check_rank(op, "offsets", g.offsets, 1);
  const int64_t experts = g.offsets.size(0) - 1;
  DSPARK_CHECK(experts >= 1, "{}: offsets must have at least 2 entries (E + 1)", op);
  check_index_vector(op, "offsets", g.offsets, experts + 1, ctx);
  check_index_vector(op, "active", g.active, experts + 1, ctx);
  check_index_vector(op, "order", g.order, m, ctx);
  check_rank(op, "slots", g.slots, 2);
  DSPARK_CHECK(g.slots.numel() == m, "{}: slots {} hold {} pairs, expected {}", op,
               g.slots.shape().str(), g.slots.numel(), m);
  check_choices(op, "slots", g.slots, DType::i32, g.slots.size(0), g.slots.size(1), ctx);
}

bool device_dtype(DType t) {
  return t == DType::bf16 || t == DType::f16 || t == DType::f32;
}

}  // namespace

namespace {

void check_grouping(const char* op, const Tensor& ids, const MoeGroups& g, const Context& ctx) {
  check_rank(op, "ids", ids, 2);
  const int64_t n = ids.size(0), k = ids.size(1);
  check_choices(op, "ids", ids, DType::i32, n, k, ctx);
  check_groups(op, g, n * k, ctx);
  check_shape(op, "slots", g.slots, Shape{n, k});
  DSPARK_CHECK(k >= 1 && k <= g.offsets.size(0) - 1, "{}: {} choices per token of {} experts", op,
               k, g.offsets.size(0) - 1);
}

}  // namespace

void moe_group(Context& ctx, const Tensor& ids, const MoeGroups& g) {
  check_grouping("moe_group", ids, g, ctx);
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::moe_group(ctx, ids, g));
  } else {
    cpu::moe_group(ctx, ids, g);
  }
}

bool moe_linear_on_device(const Context& ctx, const WeightMatrix& w, DType x, int64_t m) {
  if (!ctx.is_cuda()) return true;
  if (m > kMoeDeviceRows) return false;
  if (w.format == WeightFormat::blocks)
    return w.k >= 256 && w.k % 256 == 0 && ctx.cuda_caps().compute_major >= 8 &&
           (x == DType::f32 || x == DType::bf16 || x == DType::f16);
  return w.format == WeightFormat::dense && device_dtype(w.data.dtype()) && x == w.data.dtype() &&
         (w.k * static_cast<int64_t>(dtype_size(x))) % 16 == 0;
}

namespace {

// The arguments of an expert product of m grouped rows: x (float rows whose k_cols values each
// product row takes), w (E stacked experts of K = k_cols), g, y [m, N]. Returns N.
int64_t check_expert_product(const char* op, const Tensor& x, int64_t k_cols, const WeightMatrix& w,
                             const MoeGroups& g, int64_t m, const Tensor& y, const Context& ctx) {
  check_float_rows(op, "x", x, ctx);
  check_float_rows(op, "y", y, ctx);
  check_groups(op, g, m, ctx);
  const int64_t experts = g.offsets.size(0) - 1;
  DSPARK_CHECK(w.n > 0 && w.n % experts == 0, "{}: w has {} rows, not a multiple of {} experts", op,
               w.n, experts);
  DSPARK_CHECK(k_cols == w.k, "{}: x has {} columns, w takes {}", op, k_cols, w.k);
  const int64_t n = w.n / experts;
  check_shape(op, "y", y, Shape{m, n});
  return n;
}

}  // namespace

void moe_linear(Context& ctx, const Tensor& x, const WeightMatrix& w, const MoeGroups& g,
                const Tensor& y) {
  constexpr const char* kOp = "moe_linear";
  const int64_t m = x.size(0), experts = g.offsets.size(0) - 1;
  const int64_t n = check_expert_product(kOp, x, x.size(1), w, g, m, y, ctx);
  if (m == 0) return;
  if (ctx.is_cuda() && moe_linear_on_device(ctx, w, x.dtype(), m)) {
    check_on_device(kOp, "w", w.data, ctx);
    if (w.format == WeightFormat::blocks) {
      DSPARK_ON_CUDA(cuda::moe_linear_blocks(ctx, x, w, g, y));
    } else {
      DSPARK_ON_CUDA(cuda::moe_linear(ctx, x, w.data, g, y));
    }
    return;
  }
  // linear() per expert over its rows, the grouping read on the host.
  std::vector<int32_t> offsets(static_cast<size_t>(experts) + 1);
  if (ctx.is_cuda()) {
    ctx.copy_async(offsets.data(), g.offsets.data(), offsets.size() * sizeof(int32_t));
    ctx.synchronize();
  } else {
    const auto* src = g.offsets.data_as<int32_t>();
    offsets.assign(src, src + experts + 1);
  }
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t lo = offsets[static_cast<size_t>(e)], hi = offsets[static_cast<size_t>(e) + 1];
    DSPARK_CHECK(0 <= lo && lo <= hi && hi <= m, "{}: expert {} has rows [{}, {}) of {}", kOp, e,
                 lo, hi, m);
  }
  const bool blocks = w.format == WeightFormat::blocks || w.format == WeightFormat::blocks_x8;
  if (!ctx.is_cuda() && blocks) {
    // The CPU's block products of every expert with rows in one pass of the pool: a decode step's
    // few experts of a layer are short products, each of which would wait for the threads.
    // The grouping's row ranges follow one another, so the experts with rows cover them in order.
    // The calling thread's lists, grown once and reused by every layer of every step.
    thread_local std::vector<WeightMatrix> ws;
    thread_local std::vector<int64_t> bounds;
    ws.clear();
    bounds.clear();
    for (int64_t e = 0; e < experts; ++e) {
      const int32_t lo = offsets[static_cast<size_t>(e)], hi = offsets[static_cast<size_t>(e) + 1];
      if (lo == hi) continue;
      if (bounds.empty()) bounds.push_back(lo);
      DSPARK_CHECK(bounds.back() == lo, "{}: expert {}'s rows do not follow the previous ones", kOp,
                   e);
      ws.push_back(weight_rows(w, e * n, (e + 1) * n));
      bounds.push_back(hi);
    }
    if (!ws.empty()) cpu::linear_blocks_grouped(ctx, x, ws, bounds, y);
    return;
  }
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t lo = offsets[static_cast<size_t>(e)], hi = offsets[static_cast<size_t>(e) + 1];
    if (lo == hi) continue;
    linear(ctx, x.rows(lo, hi), weight_rows(w, e * n, (e + 1) * n), Tensor{}, y.rows(lo, hi));
  }
}

void moe_linear_gather(Context& ctx, const Tensor& x, const Tensor& rows, const WeightMatrix& w,
                       const MoeGroups& g, const Tensor& y) {
  constexpr const char* kOp = "moe_linear_gather";
  const int64_t m = g.order.size(0);
  if (ctx.is_cuda() && m > 0 && moe_linear_on_device(ctx, w, x.dtype(), m)) {
    check_expert_product(kOp, x, x.size(1), w, g, m, y, ctx);
    check_on_device(kOp, "w", w.data, ctx);
    if (w.format == WeightFormat::blocks) {
      DSPARK_ON_CUDA(cuda::moe_linear_blocks(ctx, x, w, g, y, /*gather=*/true));
    } else {
      DSPARK_ON_CUDA(cuda::moe_linear(ctx, x, w.data, g, y, /*gather=*/true));
    }
    return;
  }
  gather_rows(ctx, x, g.order, rows);
  moe_linear(ctx, rows, w, g, y);
}

void moe_linear_swiglu(Context& ctx, const Tensor& gate_up, const Tensor& act,
                       const WeightMatrix& w, const MoeGroups& g, const Tensor& y) {
  constexpr const char* kOp = "moe_linear_swiglu";
  const int64_t m = g.order.size(0), inter = act.size(1);
  if (ctx.is_cuda() && w.format == WeightFormat::blocks && m > 0 &&
      moe_linear_on_device(ctx, w, act.dtype(), m) && gate_up.dtype() == act.dtype()) {
    check_float_rows(kOp, "act", act, ctx);
    check_shape(kOp, "gate_up", gate_up, Shape{m, 2 * inter});
    check_expert_product(kOp, gate_up, inter, w, g, m, y, ctx);
    check_on_device(kOp, "w", w.data, ctx);
    DSPARK_ON_CUDA(cuda::moe_linear_blocks(ctx, gate_up, w, g, y, false, act.dtype()));
    return;
  }
  swiglu(ctx, gate_up.slice(1, 0, inter), gate_up.slice(1, inter, 2 * inter), act);
  moe_linear(ctx, act, w, g, y);
}

}  // namespace dspark
