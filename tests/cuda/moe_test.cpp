// moe_route, moe_route_grouped, moe_combine, moe_group and moe_linear: CUDA vs CPU. The route
// must choose the same experts in the same order (ties -> the lower index, NaN last) with weights
// equal to f32 rounding; the grouping must be identical.
#include "dspark/ops/moe.h"

#include <algorithm>
#include <cmath>

#include "cuda/cuda_consistency.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"

namespace dspark::test {
namespace {

TEST(CudaMoe, RouteMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (const auto [n, experts, k] : {std::array<int64_t, 3>{1, 8, 2},
                                       {37, 8, 2},
                                       {5, 128, 8},
                                       {300, 64, 6},
                                       {3, 256, 8},
                                       {9, 33, 1}}) {
      for (bool normalize : {false, true}) {
        // Logits rounded to quarters: exact ties between experts in many rows.
        std::vector<float> v = random_normal(static_cast<size_t>(n * experts), seed++, 2.0f);
        if (seed % 2 == 0)
          for (float& f : v) f = std::round(f * 4.0f) / 4.0f;
        const Pair logits = values_pair(v, dtype, Shape{n, experts});
        const Pair ids = zeros_pair(DType::i32, Shape{n, k});
        const Pair w = zeros_pair(DType::f32, Shape{n, k});
        moe_route(ctx.cpu, logits.cpu, normalize, ids.cpu, w.cpu);
        moe_route(ctx.gpu, logits.gpu, normalize, ids.gpu, w.gpu);
        ctx.gpu.synchronize();
        const std::string what =
            fmt::format("{} n={} E={} k={} normalize={}", name_of(dtype), n, experts, k, normalize);
        EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids " << what;
        // The softmax denominator sums E experts in another order (warp tree against the CPU's
        // sequential loop): f32 rounding of up to ~E ulps in the worst case, ~sqrt(E) typical.
        expect_close(w.gpu, w.cpu, 1e-5, "weights " + what);
      }
    }
  }
}

TEST(CudaMoe, RouteNanRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const std::vector<float> v = {1, 3, 3, 0, 3, NAN, 0, 2, 2, -1};
  const Pair logits = values_pair(v, DType::f32, Shape{2, 5});
  const Pair ids = zeros_pair(DType::i32, Shape{2, 3});
  const Pair w = zeros_pair(DType::f32, Shape{2, 3});
  moe_route(ctx.cpu, logits.cpu, false, ids.cpu, w.cpu);
  moe_route(ctx.gpu, logits.gpu, false, ids.gpu, w.gpu);
  ctx.gpu.synchronize();
  EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids";
  expect_equal(w.gpu, w.cpu, "weights (NaN where the CPU has NaN)");
}

TEST(CudaMoe, RouteGroupedMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 50;
  for (DType dtype : kFloatDTypes) {
    for (const auto [n, experts, groups, topk_group, k] : {std::array<int64_t, 5>{1, 8, 4, 2, 2},
                                                           {37, 8, 1, 1, 3},
                                                           {5, 256, 8, 4, 8},
                                                           {300, 64, 8, 3, 6},
                                                           {9, 160, 40, 36, 1},
                                                           {3, 64, 1, 1, 6},
                                                           {4, 256, 2, 1, 8},
                                                           {2, 96, 2, 2, 4}}) {
      for (bool normalize : {false, true}) {
        // Logits rounded to quarters and a zero bias on odd seeds: exact ties between experts
        // and between groups in many rows.
        std::vector<float> v = random_normal(static_cast<size_t>(n * experts), seed++, 2.0f);
        std::vector<float> b = random_normal(static_cast<size_t>(experts), seed++, 0.1f);
        if (seed % 2 == 0) {
          for (float& f : v) f = std::round(f * 4.0f) / 4.0f;
          std::fill(b.begin(), b.end(), 0.0f);
        }
        const Pair logits = values_pair(v, dtype, Shape{n, experts});
        const Pair bias = values_pair(b, DType::f32, Shape{experts});
        const Pair ids = zeros_pair(DType::i32, Shape{n, k});
        const Pair w = zeros_pair(DType::f32, Shape{n, k});
        const MoeGroupRouting p{static_cast<int>(groups), static_cast<int>(topk_group), normalize,
                                2.5f};
        moe_route_grouped(ctx.cpu, logits.cpu, bias.cpu, p, ids.cpu, w.cpu);
        moe_route_grouped(ctx.gpu, logits.gpu, bias.gpu, p, ids.gpu, w.gpu);
        ctx.gpu.synchronize();
        const std::string what =
            fmt::format("{} n={} E={} G={} TG={} k={} normalize={}", name_of(dtype), n, experts,
                        groups, topk_group, k, normalize);
        // The same sigmoid up to an ulp of expf: ties built from equal logits stay ties.
        EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids " << what;
        expect_close(w.gpu, w.cpu, 1e-5, "weights " + what);
      }
    }
  }
}

TEST(CudaMoe, CombineMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 100;
  for (DType in : kFloatDTypes) {
    for (DType out : {DType::f32, in}) {
      for (const auto [n, k, h] : {std::array<int64_t, 3>{1, 2, 64}, {17, 8, 2048}, {5, 1, 37}}) {
        const int64_t m = n * k;
        const Pair ex = random_pair(in, Shape{m, h}, seed++);
        std::vector<int32_t> slots =
            random_ints(static_cast<size_t>(n * k), 0, static_cast<int32_t>(m - 1), seed++);
        const Pair s = vector_pair(slots, Shape{n, k});
        const Pair w = random_pair(DType::f32, Shape{n, k}, seed++);
        const Pair o = zeros_pair(out, Shape{n, h});
        moe_combine(ctx.cpu, ex.cpu, s.cpu, w.cpu, o.cpu);
        moe_combine(ctx.gpu, ex.gpu, s.gpu, w.gpu, o.gpu);
        ctx.gpu.synchronize();
        expect_close(o.gpu, o.cpu, tolerance(out),
                     fmt::format("{} -> {} n={} k={} h={}", name_of(in), name_of(out), n, k, h));
      }
    }
  }
}

struct GroupsPair {
  Pair offsets, active, order, slots;
  MoeGroups cpu() const { return {offsets.cpu, active.cpu, order.cpu, slots.cpu}; }
  MoeGroups gpu() const { return {offsets.gpu, active.gpu, order.gpu, slots.gpu}; }
};

GroupsPair group_both(Contexts& ctx, const Pair& ids, int64_t experts) {
  const int64_t n = ids.cpu->size(0), k = ids.cpu->size(1);
  GroupsPair g{zeros_pair(DType::i32, Shape{experts + 1}),
               zeros_pair(DType::i32, Shape{experts + 1}), zeros_pair(DType::i32, Shape{n * k}),
               zeros_pair(DType::i32, Shape{n, k})};
  moe_group(ctx.cpu, ids.cpu, g.cpu());
  moe_group(ctx.gpu, ids.gpu, g.gpu());
  ctx.gpu.synchronize();
  return g;
}

TEST(CudaMoe, GroupMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 200;
  for (const auto [n, experts, k] : {std::array<int64_t, 3>{1, 128, 8},
                                     {17, 128, 8},
                                     {33, 64, 6},
                                     {5, 8, 2},
                                     {300, 64, 6},
                                     {4096, 256, 8},
                                     {3, 40, 1}}) {
    const Pair ids = vector_pair(random_expert_choices(n, experts, k, seed++), Shape{n, k});
    const GroupsPair g = group_both(ctx, ids, experts);
    const std::string what = fmt::format("n={} E={} k={}", n, experts, k);
    EXPECT_EQ(to_vector<int32_t>(g.offsets.gpu), to_vector<int32_t>(g.offsets.cpu)) << what;
    EXPECT_EQ(to_vector<int32_t>(g.order.gpu), to_vector<int32_t>(g.order.cpu)) << what;
    EXPECT_EQ(to_vector<int32_t>(g.slots.gpu), to_vector<int32_t>(g.slots.cpu)) << what;
    const std::vector<int32_t> a_gpu = to_vector<int32_t>(g.active.gpu),
                               a_cpu = to_vector<int32_t>(g.active.cpu);
    ASSERT_EQ(a_gpu[0], a_cpu[0]) << what;
    EXPECT_TRUE(std::equal(a_gpu.begin(), a_gpu.begin() + 1 + a_gpu[0], a_cpu.begin())) << what;
  }
}

// moe_route_and_group / moe_route_grouped_and_group: the fused launch (up to 32 rows) and the
// two kernels past it choose, weigh and group like the CPU's moe_route(_grouped) then moe_group.
TEST(CudaMoe, RouteAndGroupMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 900;
  for (const auto [n, experts, k] : {std::array<int64_t, 3>{1, 128, 8},
                                     {17, 128, 8},
                                     {32, 64, 6},
                                     {33, 128, 8},
                                     {4, 256, 8},
                                     {3, 16, 8}}) {
    // Softmax routing, then grouped routing with 8 groups (4 kept) and with one group.
    for (int mode : {0, 1, 2}) {
      const bool grouped = mode > 0;
      std::vector<float> v = random_normal(static_cast<size_t>(n * experts), seed++, 2.0f);
      if (seed % 2 == 0)
        for (float& f : v) f = std::round(f * 4.0f) / 4.0f;  // ties
      const Pair logits = values_pair(v, DType::bf16, Shape{n, experts});
      const Pair bias = values_pair(random_normal(static_cast<size_t>(experts), seed++, 0.1f),
                                    DType::f32, Shape{experts});
      const MoeGroupRouting p =
          mode == 2 ? MoeGroupRouting{1, 1, true, 2.5f} : MoeGroupRouting{8, 4, true, 2.5f};
      const Pair ids = zeros_pair(DType::i32, Shape{n, k}), w = zeros_pair(DType::f32, Shape{n, k});
      GroupsPair g{zeros_pair(DType::i32, Shape{experts + 1}),
                   zeros_pair(DType::i32, Shape{experts + 1}), zeros_pair(DType::i32, Shape{n * k}),
                   zeros_pair(DType::i32, Shape{n, k})};
      if (grouped) {
        moe_route_grouped(ctx.cpu, logits.cpu, bias.cpu, p, ids.cpu, w.cpu);
        moe_group(ctx.cpu, ids.cpu, g.cpu());
        moe_route_grouped_and_group(ctx.gpu, logits.gpu, bias.gpu, p, ids.gpu, w.gpu, g.gpu());
      } else {
        moe_route(ctx.cpu, logits.cpu, true, ids.cpu, w.cpu);
        moe_group(ctx.cpu, ids.cpu, g.cpu());
        moe_route_and_group(ctx.gpu, logits.gpu, true, ids.gpu, w.gpu, g.gpu());
      }
      ctx.gpu.synchronize();
      const std::string what =
          fmt::format("n={} E={} k={} grouped={} groups={}", n, experts, k, grouped, p.n_group);
      EXPECT_EQ(to_vector<int32_t>(ids.gpu), to_vector<int32_t>(ids.cpu)) << "ids " << what;
      expect_close(w.gpu, w.cpu, 1e-5, "weights " + what);
      for (const auto& [name, t] : {std::pair<const char*, const Pair*>{"offsets", &g.offsets},
                                    {"active", &g.active},
                                    {"order", &g.order},
                                    {"slots", &g.slots}})
        EXPECT_EQ(to_vector<int32_t>(t->gpu), to_vector<int32_t>(t->cpu)) << name << " " << what;
    }
  }
}

TEST(CudaMoe, LinearMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 300;
  // n tokens, E experts, k choices, N rows per expert, K; the last case has more rows than
  // kMoeDeviceRows: CUDA then runs linear() per expert.
  for (const auto [n, experts, k, rows, cols] : {std::array<int64_t, 5>{1, 16, 4, 72, 256},
                                                 {17, 16, 4, 40, 264},
                                                 {9, 8, 2, 33, 64},
                                                 {33, 64, 6, 128, 2048},
                                                 {2, 4, 4, 16, 1032},
                                                 {100, 16, 8, 24, 128}}) {
    const Pair ids = vector_pair(random_expert_choices(n, experts, k, seed++), Shape{n, k});
    const GroupsPair g = group_both(ctx, ids, experts);
    for (DType in : kFloatDTypes) {
      for (DType out : {DType::f32, in}) {
        const int64_t m = n * k;
        const Pair x = random_pair(in, Shape{m, cols}, seed++);
        const Pair w = random_pair(in, Shape{experts * rows, cols}, seed++, 0.05f);
        // y: a column slice of a wider buffer, as moe_block's gate_up halves are.
        const Pair wide = zeros_pair(out, Shape{m, 2 * rows});
        const Tensor y_cpu = columns(wide.cpu, rows, rows), y_gpu = columns(wide.gpu, rows, rows);
        moe_linear(ctx.cpu, x.cpu, WeightMatrix::dense(w.cpu), g.cpu(), y_cpu);
        moe_linear(ctx.gpu, x.gpu, WeightMatrix::dense(w.gpu), g.gpu(), y_gpu);
        ctx.gpu.synchronize();
        expect_close(wide.gpu, wide.cpu, tolerance(out),
                     fmt::format("{} -> {} n={} E={} k={} N={} K={}", name_of(in), name_of(out), n,
                                 experts, k, rows, cols));
      }
    }
  }
}

// Dense experts: moe_linear_gather and moe_linear_swiglu read x through the grouping / compute
// SwiGLU as they load it, with the same bits as gather_rows or swiglu then moe_linear on the
// device, and close to the CPU's.
TEST(CudaMoe, LinearDenseGatherAndSwigluEqualUnfused) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 950;
  for (const auto [n, experts, k, rows, cols] :
       {std::array<int64_t, 5>{1, 16, 8, 72, 256}, {17, 16, 4, 40, 512}, {5, 8, 2, 24, 2048}}) {
    const Pair ids = vector_pair(random_expert_choices(n, experts, k, seed++), Shape{n, k});
    const GroupsPair g = group_both(ctx, ids, experts);
    const int64_t m = n * k;
    for (DType dt : kFloatDTypes) {
      const Pair w = random_pair(dt, Shape{experts * rows, cols}, seed++, 0.05f);
      const WeightMatrix wg = WeightMatrix::dense(w.gpu), wc = WeightMatrix::dense(w.cpu);
      const std::string what =
          fmt::format("{} n={} E={} k={} N={} K={}", name_of(dt), n, experts, k, rows, cols);
      {  // gather
        const Pair x = random_pair(dt, Shape{n, cols}, seed++);
        const Pair rows_buf = zeros_pair(dt, Shape{m, cols}),
                   gathered = zeros_pair(dt, Shape{m, cols});
        const Pair y = zeros_pair(DType::f32, Shape{m, rows}),
                   y_ref = zeros_pair(DType::f32, Shape{m, rows});
        gather_rows(ctx.gpu, x.gpu, g.order.gpu, gathered.gpu);
        moe_linear(ctx.gpu, gathered.gpu, wg, g.gpu(), y_ref.gpu);
        moe_linear_gather(ctx.gpu, x.gpu, rows_buf.gpu, wg, g.gpu(), y.gpu);
        moe_linear_gather(ctx.cpu, x.cpu, rows_buf.cpu, wc, g.cpu(), y.cpu);
        ctx.gpu.synchronize();
        expect_equal(y.gpu, y_ref.gpu, "gather " + what);
        expect_close(y.gpu, y.cpu, 1e-5, "gather " + what);
      }
      {  // swiglu
        const Pair gate_up = random_pair(dt, Shape{m, 2 * cols}, seed++);
        const Pair act = zeros_pair(dt, Shape{m, cols}), act_ref = zeros_pair(dt, Shape{m, cols});
        const Pair y = zeros_pair(DType::f32, Shape{m, rows}),
                   y_ref = zeros_pair(DType::f32, Shape{m, rows});
        swiglu(ctx.gpu, gate_up.gpu->slice(1, 0, cols), gate_up.gpu->slice(1, cols, 2 * cols),
               act_ref.gpu);
        moe_linear(ctx.gpu, act_ref.gpu, wg, g.gpu(), y_ref.gpu);
        moe_linear_swiglu(ctx.gpu, gate_up.gpu, act.gpu, wg, g.gpu(), y.gpu);
        moe_linear_swiglu(ctx.cpu, gate_up.cpu, act.cpu, wc, g.cpu(), y.cpu);
        ctx.gpu.synchronize();
        expect_equal(y.gpu, y_ref.gpu, "swiglu " + what);
        expect_close(y.gpu, y.cpu, tolerance(dt), "swiglu " + what);
      }
    }
  }
}

// A token's rows are the same bits whether it is routed alone or among 16 other tokens (so a
// verify's rows equal a decode's).
TEST(CudaMoe, LinearRowsDoNotDependOnTheBatch) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t experts = 32, k = 4, n = 17, rows = 96, cols = 512;
  std::vector<int32_t> choices = random_expert_choices(n, experts, k, 400);
  const Pair ids = vector_pair(choices, Shape{n, k});
  const GroupsPair g = group_both(ctx, ids, experts);
  const Pair x_tokens = random_pair(DType::bf16, Shape{n, cols}, 401);
  const Pair w = random_pair(DType::bf16, Shape{experts * rows, cols}, 402, 0.05f);
  const Pair x = zeros_pair(DType::bf16, Shape{n * k, cols});
  gather_rows(ctx.gpu, x_tokens.gpu, g.order.gpu, x.gpu);
  const Pair y = zeros_pair(DType::bf16, Shape{n * k, rows});
  moe_linear(ctx.gpu, x.gpu, WeightMatrix::dense(w.gpu), g.gpu(), y.gpu);
  const std::vector<int32_t> slots = to_vector<int32_t>(g.slots.cpu);
  const int64_t token = 11;
  const Pair one_ids = vector_pair(
      std::vector<int32_t>(choices.begin() + token * k, choices.begin() + (token + 1) * k),
      Shape{1, k});
  const GroupsPair one = group_both(ctx, one_ids, experts);
  const Pair one_x = zeros_pair(DType::bf16, Shape{k, cols});
  gather_rows(ctx.gpu, x_tokens.gpu->rows(token, token + 1), one.order.gpu, one_x.gpu);
  const Pair one_y = zeros_pair(DType::bf16, Shape{k, rows});
  moe_linear(ctx.gpu, one_x.gpu, WeightMatrix::dense(w.gpu), one.gpu(), one_y.gpu);
  ctx.gpu.synchronize();
  const std::vector<int32_t> one_slots = to_vector<int32_t>(one.slots.cpu);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t in_batch = slots[static_cast<size_t>(token * k + j)];
    const int64_t alone = one_slots[static_cast<size_t>(j)];
    expect_equal(one_y.gpu->rows(alone, alone + 1), y.gpu->rows(in_batch, in_batch + 1),
                 fmt::format("choice {}", j));
  }
}

// GGUF block experts: one stacked [E * N, row bytes] matrix on both devices.
struct BlockExperts {
  Pair bytes;
  WeightMatrix matrix(const Tensor& data, QuantType q, int64_t n, int64_t k) const {
    WeightMatrix w;
    w.format = WeightFormat::blocks;
    w.quant = q;
    w.data = data;
    w.n = n;
    w.k = k;
    return w;
  }
  WeightMatrix cpu(QuantType q, int64_t n, int64_t k) const { return matrix(bytes.cpu, q, n, k); }
  WeightMatrix gpu(QuantType q, int64_t n, int64_t k) const { return matrix(bytes.gpu, q, n, k); }
};

BlockExperts random_block_experts(QuantType q, int64_t n, int64_t k, uint32_t seed) {
  return {vector_pair(random_quant_blocks(q, n, k, seed), Shape{n, quant_row_bytes(q, k)})};
}

// Block-quantized experts on the device (moe_linear_blocks.cu) against the CPU's quantized
// products: both round x to int8 per block of 32 the same way, so with f32 y only the order of
// the f32 sums differs (1e-5, as the few-row linear kernel); other y: their rounding. K of 1 to
// 12 super-blocks (8 rows a warp at once, 2, 1; two stages a row), 1 to 6 rows per expert, N not
// a multiple of a CTA's rows; the last case has more rows than kMoeDeviceRows (the host path).
TEST(CudaMoe, LinearBlocksMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 500;
  for (const auto [n, experts, k, rows, cols] : {std::array<int64_t, 5>{1, 16, 4, 72, 256},
                                                 {17, 16, 4, 40, 768},
                                                 {9, 8, 2, 33, 2048},
                                                 {33, 64, 6, 24, 3072},
                                                 {6, 4, 4, 20, 512},
                                                 {100, 8, 8, 16, 256}}) {
    const Pair ids = vector_pair(random_expert_choices(n, experts, k, seed++), Shape{n, k});
    const GroupsPair g = group_both(ctx, ids, experts);
    const int64_t m = n * k;
    for (QuantType q : kQuantTypes) {
      const BlockExperts w = random_block_experts(q, experts * rows, cols, seed++);
      for (DType in : kFloatDTypes) {
        const Pair x = random_pair(in, Shape{m, cols}, seed++);
        for (DType out : {DType::f32, in}) {
          const Pair wide = zeros_pair(out, Shape{m, 2 * rows});
          const Tensor y_cpu = columns(wide.cpu, rows, rows), y_gpu = columns(wide.gpu, rows, rows);
          moe_linear(ctx.cpu, x.cpu, w.cpu(q, experts * rows, cols), g.cpu(), y_cpu);
          moe_linear(ctx.gpu, x.gpu, w.gpu(q, experts * rows, cols), g.gpu(), y_gpu);
          ctx.gpu.synchronize();
          // Past kMoeDeviceRows CUDA's linear() per expert runs the tensor-core kernel (weights
          // rounded to x's type, x not rounded) against the CPU's int8 x: ~1e-2 apart.
          const double tol = m > kMoeDeviceRows ? 3e-2 : out == DType::f32 ? 1e-5 : tolerance(out);
          expect_close(wide.gpu, wide.cpu, tol,
                       fmt::format("{} {} -> {} n={} E={} k={} N={} K={}", quant_type_name(q),
                                   name_of(in), name_of(out), n, experts, k, rows, cols));
        }
      }
    }
  }
}

// moe_linear_gather with block experts reads the tokens' rows through the grouping in the
// rounding kernel: the same bits as gather_rows then moe_linear on the device, for every block
// type, x dtype and shape of LinearBlocksMatchCpu's kind (1 to 8 choices per token).
TEST(CudaMoe, LinearGatherEqualsGatherThenLinear) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 700;
  for (const auto [n, experts, k, rows, cols] :
       {std::array<int64_t, 5>{1, 16, 8, 72, 2048}, {17, 16, 4, 40, 768}, {5, 64, 6, 24, 3072}}) {
    const Pair ids = vector_pair(random_expert_choices(n, experts, k, seed++), Shape{n, k});
    const GroupsPair g = group_both(ctx, ids, experts);
    const int64_t m = n * k;
    for (QuantType q : kQuantTypes) {
      const BlockExperts w = random_block_experts(q, experts * rows, cols, seed++);
      const WeightMatrix wg = w.gpu(q, experts * rows, cols);
      for (DType in : kFloatDTypes) {
        const Pair x = random_pair(in, Shape{n, cols}, seed++);
        const Pair gathered = zeros_pair(in, Shape{m, cols}),
                   unused = zeros_pair(in, Shape{m, cols});
        const Pair y_ref = zeros_pair(DType::f32, Shape{m, rows}),
                   y = zeros_pair(DType::f32, Shape{m, rows});
        gather_rows(ctx.gpu, x.gpu, g.order.gpu, gathered.gpu);
        moe_linear(ctx.gpu, gathered.gpu, wg, g.gpu(), y_ref.gpu);
        moe_linear_gather(ctx.gpu, x.gpu, unused.gpu, wg, g.gpu(), y.gpu);
        moe_linear_gather(ctx.cpu, x.cpu, unused.cpu, w.cpu(q, experts * rows, cols), g.cpu(),
                          y.cpu);
        ctx.gpu.synchronize();
        const std::string what = fmt::format("{} {} n={} E={} k={} N={} K={}", quant_type_name(q),
                                             name_of(in), n, experts, k, rows, cols);
        expect_equal(y.gpu, y_ref.gpu, what);
        expect_close(y.gpu, y.cpu, 1e-5, what);
      }
    }
  }
}

// moe_linear_swiglu with block experts computes SwiGLU while rounding x: the same bits as swiglu
// then moe_linear on the device; against the CPU (its own expf in SwiGLU, so an int8 x value may
// round the other way) within 2e-2 relative RMS.
TEST(CudaMoe, LinearSwigluEqualsSwigluThenLinear) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 800;
  for (const auto [n, experts, k, rows, inter] :
       {std::array<int64_t, 5>{1, 16, 8, 64, 768}, {17, 16, 4, 40, 512}, {3, 8, 2, 24, 2048}}) {
    const Pair ids = vector_pair(random_expert_choices(n, experts, k, seed++), Shape{n, k});
    const GroupsPair g = group_both(ctx, ids, experts);
    const int64_t m = n * k;
    for (QuantType q : {QuantType::q4_k, QuantType::q6_k, QuantType::q8_0, QuantType::q4_0}) {
      const BlockExperts w = random_block_experts(q, experts * rows, inter, seed++);
      const WeightMatrix wg = w.gpu(q, experts * rows, inter);
      for (DType dt : kFloatDTypes) {
        const Pair gate_up = random_pair(dt, Shape{m, 2 * inter}, seed++);
        const Pair act = zeros_pair(dt, Shape{m, inter}), act_ref = zeros_pair(dt, Shape{m, inter});
        const Pair y = zeros_pair(DType::f32, Shape{m, rows}),
                   y_ref = zeros_pair(DType::f32, Shape{m, rows});
        swiglu(ctx.gpu, gate_up.gpu->slice(1, 0, inter), gate_up.gpu->slice(1, inter, 2 * inter),
               act_ref.gpu);
        moe_linear(ctx.gpu, act_ref.gpu, wg, g.gpu(), y_ref.gpu);
        moe_linear_swiglu(ctx.gpu, gate_up.gpu, act.gpu, wg, g.gpu(), y.gpu);
        moe_linear_swiglu(ctx.cpu, gate_up.cpu, act.cpu, w.cpu(q, experts * rows, inter), g.cpu(),
                          y.cpu);
        ctx.gpu.synchronize();
        const std::string what = fmt::format("{} {} n={} E={} k={} N={} I={}", quant_type_name(q),
                                             name_of(dt), n, experts, k, rows, inter);
        expect_equal(y.gpu, y_ref.gpu, what);
        expect_close(y.gpu, y.cpu, 2e-2, what);
      }
    }
  }
}

// A token's rows are the same bits alone or among 16 other tokens with block experts, for K of
// 3, 8 and 16 super-blocks (two rows a warp at once; one; two stages a row).
TEST(CudaMoe, LinearBlocksRowsDoNotDependOnTheBatch) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t experts = 16, k = 4, n = 17, rows = 48;
  uint32_t seed = 600;
  for (QuantType q : {QuantType::q4_k, QuantType::q6_k, QuantType::q8_0}) {
    for (int64_t cols : {768, 2048, 4096}) {
      std::vector<int32_t> choices = random_expert_choices(n, experts, k, seed++);
      const Pair ids = vector_pair(choices, Shape{n, k});
      const GroupsPair g = group_both(ctx, ids, experts);
      const Pair x_tokens = random_pair(DType::bf16, Shape{n, cols}, seed++);
      const BlockExperts w = random_block_experts(q, experts * rows, cols, seed++);
      const WeightMatrix wg = w.gpu(q, experts * rows, cols);
      const Pair x = zeros_pair(DType::bf16, Shape{n * k, cols});
      gather_rows(ctx.gpu, x_tokens.gpu, g.order.gpu, x.gpu);
      const Pair y = zeros_pair(DType::bf16, Shape{n * k, rows});
      moe_linear(ctx.gpu, x.gpu, wg, g.gpu(), y.gpu);
      const std::vector<int32_t> slots = to_vector<int32_t>(g.slots.cpu);
      for (const int64_t token : {int64_t{0}, int64_t{11}}) {
        const Pair one_ids = vector_pair(
            std::vector<int32_t>(choices.begin() + token * k, choices.begin() + (token + 1) * k),
            Shape{1, k});
        const GroupsPair one = group_both(ctx, one_ids, experts);
        const Pair one_x = zeros_pair(DType::bf16, Shape{k, cols});
        gather_rows(ctx.gpu, x_tokens.gpu->rows(token, token + 1), one.order.gpu, one_x.gpu);
        const Pair one_y = zeros_pair(DType::bf16, Shape{k, rows});
        moe_linear(ctx.gpu, one_x.gpu, wg, one.gpu(), one_y.gpu);
        ctx.gpu.synchronize();
        const std::vector<int32_t> one_slots = to_vector<int32_t>(one.slots.cpu);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t in_batch = slots[static_cast<size_t>(token * k + j)];
          const int64_t alone = one_slots[static_cast<size_t>(j)];
          expect_equal(
              one_y.gpu->rows(alone, alone + 1), y.gpu->rows(in_batch, in_batch + 1),
              fmt::format("{} K={} token {} choice {}", quant_type_name(q), cols, token, j));
        }
      }
    }
  }
}

}  // namespace
}  // namespace dspark::test
