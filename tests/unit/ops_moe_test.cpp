// moe_route, moe_route_grouped and moe_combine against double-precision references, the tie and
// NaN rules, transformers' routing on the MoE golden fixtures, and the refused arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "dspark/ops/moe.h"

namespace dspark {
namespace {

using test::random_tensor;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(Context& ctx, const Tensor& logits, int64_t k, bool normalize) {
  const int64_t n = logits.size(0);
  OwnedTensor ids(DType::i32, Shape{n, k}, Device::cpu());
  OwnedTensor w(DType::f32, Shape{n, k}, Device::cpu());
  moe_route(ctx, logits, normalize, ids, w);
  return {to_vector<int32_t>(ids.view()), to_vector<float>(w.view())};
}

// The reference: softmax in double, a stable sort by probability (equal: the lower index first).
Routed reference_route(const std::vector<float>& x, int64_t n, int64_t e, int64_t k,
                       bool normalize) {
  Routed out;
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x.data() + r * e;
    const double m = *std::max_element(row, row + e);
    std::vector<double> p(static_cast<size_t>(e));
    double sum = 0;
    for (int64_t i = 0; i < e; ++i) sum += p[static_cast<size_t>(i)] = std::exp(row[i] - m);
    for (double& v : p) v /= sum;
    std::vector<int32_t> order(static_cast<size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
    });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = order[static_cast<size_t>(j)];
      out.ids.push_back(id);
      const double w = p[static_cast<size_t>(id)];
      out.weights.push_back(static_cast<float>(normalize ? w / chosen : w));
    }
  }
  return out;
}

TEST(OpsMoe, RouteMatchesDoubleReference) {
  Context ctx(Device::cpu());
  for (int64_t e : {2, 8, 33, 128}) {
    for (int64_t k : {1, 2, 8}) {
      if (k > e) continue;
      for (DType dtype : {DType::f32, DType::bf16}) {
        for (bool normalize : {false, true}) {
          SCOPED_TRACE(
              fmt::format("E={} k={} {} normalize={}", e, k, dtype_name(dtype), normalize));
          const int64_t n = 19;
          OwnedTensor buf = random_tensor(dtype, Shape{n, e + 3}, 7 + e + k, 3.0f);
          const Tensor x = buf.view().slice(1, 1, e + 1);  // strided rows
          const Routed got = route(ctx, x, k, normalize);
          const Routed ref = reference_route(to_f32_vector(x), n, e, k, normalize);
          EXPECT_EQ(got.ids, ref.ids);
          EXPECT_LE(test::max_abs_error(got.weights, ref.weights), 1e-6);
        }
      }
    }
  }
}

TEST(OpsMoe, RouteTiesTakeTheLowerIndexAndNanComesLast) {
  Context ctx(Device::cpu());
  const std::vector<float> x = {1,   3, 3, 0, 3,  // ties among 1, 2, 4
                                NAN, 0, 2, 2, -1};
  const OwnedTensor logits = OwnedTensor::from_vector(x, Shape{2, 5}, Device::cpu());
  Routed got = route(ctx, logits, 3, false);
  // Row 0: the three tied experts in index order, equal weights.
  EXPECT_EQ(std::vector<int32_t>(got.ids.begin(), got.ids.begin() + 3),
            (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(got.weights[0], got.weights[1]);
  EXPECT_EQ(got.weights[1], got.weights[2]);
  // Row 1: the NaN logit makes every probability NaN; NaN ranks last, so the order is by index.
  EXPECT_EQ(std::vector<int32_t>(got.ids.begin() + 3, got.ids.end()),
            (std::vector<int32_t>{0, 1, 2}));
  // With normalisation the k weights of a finite row sum to 1.
  got = route(ctx, logits.view().rows(0, 1), 2, true);
  EXPECT_EQ(got.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(got.weights[0], 0.5f);
  EXPECT_FLOAT_EQ(got.weights[1], 0.5f);
}

TEST(OpsMoe, CombineIsTheWeightedSumOfTheSlots) {
  Context ctx(Device::cpu());
  const int64_t n = 5, k = 3, h = 37, m = n * k + 2;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const OwnedTensor ex = random_tensor(dtype, Shape{m, h}, 11, 1.0f);
    std::vector<int32_t> slots(static_cast<size_t>(n * k));
    std::vector<float> w(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      slots[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(m));
      w[i] = 0.1f * static_cast<float>(i % 5) - 0.15f;
    }
    const OwnedTensor s = OwnedTensor::from_vector(slots, Shape{n, k}, Device::cpu());
    const OwnedTensor wt = OwnedTensor::from_vector(w, Shape{n, k}, Device::cpu());
    OwnedTensor out(DType::f32, Shape{n, h}, Device::cpu());
    moe_combine(ctx, ex, s, wt, out);
    const std::vector<float> e = to_f32_vector(ex.view());
    std::vector<float> ref(static_cast<size_t>(n * h), 0.0f);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t c = 0; c < h; ++c)
          ref[static_cast<size_t>(r * h + c)] +=
              w[static_cast<size_t>(r * k + j)] *
              e[static_cast<size_t>(slots[static_cast<size_t>(r * k + j)] * h + c)];
    EXPECT_LE(test::max_abs_error(to_f32_vector(out.view()), ref), 1e-6);
  }
}

// The router logits transformers computed on the qwen3_moe fixture's prompts
// (tools/goldens/make_goldens.py) routed by moe_route: the same experts in the same order, and
// the same weights.
TEST(OpsMoe, RouteMatchesTransformersOnTheGoldenFixture) {
  const auto dir = test::data_dir() / "models" / "qwen3_moe";
  if (!std::filesystem::exists(dir / "goldens.safetensors")) GTEST_SKIP() << "no qwen3_moe";
  const ModelConfig c = load_model_config(dir);
  const SafeTensors gold = SafeTensors::open(dir / "goldens.safetensors");
  Context ctx(Device::cpu());
  int checked = 0;
  for (int i = 0; i < 3; ++i) {
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = fmt::format("p{}.router{}.", i, l);
      ASSERT_EQ(gold.contains(p + "logits"), static_cast<bool>(c.layer_moe[static_cast<size_t>(l)]))
          << p;
      if (!gold.contains(p + "logits")) continue;
      const Routed got =
          route(ctx, gold.get(p + "logits"), c.num_experts_per_tok, c.norm_topk_prob);
      EXPECT_EQ(got.ids, to_vector<int32_t>(gold.get(p + "ids"))) << p;
      EXPECT_LE(test::max_abs_error(got.weights, to_vector<float>(gold.get(p + "weights"))), 1e-6)
          << p;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9);  // 3 prompts x 3 MoE layers
}

Routed route_grouped(Context& ctx, const Tensor& logits, const std::vector<float>& bias, int64_t k,
                     const MoeGroupRouting& p) {
  const int64_t n = logits.size(0);
  const OwnedTensor b = OwnedTensor::from_vector(bias, Shape{logits.size(1)}, Device::cpu());
  OwnedTensor ids(DType::i32, Shape{n, k}, Device::cpu());
  OwnedTensor w(DType::f32, Shape{n, k}, Device::cpu());
  moe_route_grouped(ctx, logits, b.view(), p, ids, w);
  return {to_vector<int32_t>(ids.view()), to_vector<float>(w.view())};
}

// DeepSeek-V3's routing in double: sigmoid, corrected scores, group scores (top-2 sums), the
// topk_group best groups (stable: equal -> lower group), the k best kept experts (stable).
Routed reference_route_grouped(const std::vector<float>& x, const std::vector<float>& bias,
                               int64_t n, int64_t e, int64_t k, const MoeGroupRouting& p) {
  Routed out;
  const int64_t gsize = e / p.n_group;
  auto stable_top = [](const std::vector<double>& v, int64_t count) {
    std::vector<int32_t> order(v.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)];
    });
    order.resize(static_cast<size_t>(count));
    return order;
  };
  for (int64_t r = 0; r < n; ++r) {
    std::vector<double> s(static_cast<size_t>(e)), c(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) {
      s[static_cast<size_t>(i)] = 1.0 / (1.0 + std::exp(-static_cast<double>(x[r * e + i])));
      c[static_cast<size_t>(i)] = s[static_cast<size_t>(i)] + bias[static_cast<size_t>(i)];
    }
    std::vector<double> group(static_cast<size_t>(p.n_group));
    for (int64_t g = 0; g < p.n_group; ++g) {
      std::vector<double> in(c.begin() + g * gsize, c.begin() + (g + 1) * gsize);
      std::sort(in.rbegin(), in.rend());
      group[static_cast<size_t>(g)] = in[0] + in[1];
    }
    const std::vector<int32_t> kept = stable_top(group, p.topk_group);
    for (int64_t i = 0; i < e; ++i) {
      if (std::find(kept.begin(), kept.end(), i / gsize) == kept.end())
        c[static_cast<size_t>(i)] = -INFINITY;
    }
    const std::vector<int32_t> ids = stable_top(c, k);
    double chosen = 0;
    for (int32_t id : ids) chosen += s[static_cast<size_t>(id)];
    for (int32_t id : ids) {
      out.ids.push_back(id);
      const double w = s[static_cast<size_t>(id)] / (p.normalize ? chosen : 1.0);
      out.weights.push_back(static_cast<float>(w * p.scale));
    }
  }
  return out;
}

TEST(OpsMoe, RouteGroupedMatchesTheReference) {
  Context ctx(Device::cpu());
  uint32_t seed = 7;
  for (const auto [n, e, groups, topk_group, k] : {std::array<int64_t, 5>{1, 8, 4, 2, 2},
                                                   {19, 8, 1, 1, 3},
                                                   {33, 64, 8, 4, 8},
                                                   {7, 256, 8, 4, 8},
                                                   {5, 12, 6, 6, 12}}) {
    for (bool normalize : {false, true}) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        const OwnedTensor logits = random_tensor(dtype, Shape{n, e}, seed++, 1.5f);
        const std::vector<float> bias =
            to_vector<float>(random_tensor(DType::f32, Shape{e}, seed++, 0.1f).view());
        const MoeGroupRouting p{static_cast<int>(groups), static_cast<int>(topk_group), normalize,
                                2.5f};
        const Routed got = route_grouped(ctx, logits, bias, k, p);
        const Routed ref = reference_route_grouped(to_f32_vector(logits.view()), bias, n, e, k, p);
        const std::string what = fmt::format("n={} E={} G={} TG={} k={} normalize={} {}", n, e,
                                             groups, topk_group, k, normalize, dtype_name(dtype));
        EXPECT_EQ(got.ids, ref.ids) << what;
        EXPECT_LE(test::max_abs_error(got.weights, ref.weights), 1e-5) << what;
      }
    }
  }
}

// Selection follows the corrected scores and the groups; the weights follow the raw scores.
TEST(OpsMoe, RouteGroupedSelectsByBiasAndGroupButWeighsByScore) {
  Context ctx(Device::cpu());
  // Experts 0..3 in 2 groups of 2. Raw order: 0 > 1 > 2 > 3; the bias lifts expert 3 above all.
  const OwnedTensor logits =
      OwnedTensor::from_vector(std::vector<float>{3, 2, 1, 0}, Shape{1, 4}, Device::cpu());
  const std::vector<float> bias = {0, 0, 0, 1};
  // One group kept: group 1 (2 + ... experts 2, 3: 0.73 + 1.5) beats group 0 (0.95 + 0.88).
  const Routed one = route_grouped(ctx, logits, bias, 2, MoeGroupRouting{2, 1, false, 1.0f});
  EXPECT_EQ(one.ids, (std::vector<int32_t>{3, 2}));
  const auto sig = [](double v) { return static_cast<float>(1.0 / (1.0 + std::exp(-v))); };
  EXPECT_NEAR(one.weights[0], sig(0), 1e-6);  // the raw score, not 1.5
  EXPECT_NEAR(one.weights[1], sig(1), 1e-6);
  // Both groups kept: expert 3 first (corrected 1.5), then 0; normalised and scaled by 2.
  const Routed two = route_grouped(ctx, logits, bias, 2, MoeGroupRouting{2, 2, true, 2.0f});
  EXPECT_EQ(two.ids, (std::vector<int32_t>{3, 0}));
  EXPECT_NEAR(two.weights[0], 2 * sig(0) / (sig(0) + sig(3)), 1e-6);
  EXPECT_NEAR(two.weights[1], 2 * sig(3) / (sig(0) + sig(3)), 1e-6);
}

// The router logits transformers computed on the deepseek_v3 and glm4_moe fixtures' prompts
// routed by moe_route_grouped: the same experts in the order of their corrected scores, the same
// weights.
class OpsMoeGrouped : public ::testing::TestWithParam<std::string> {};

TEST_P(OpsMoeGrouped, RouteMatchesTransformersOnTheGoldenFixture) {
  const auto dir = test::data_dir() / "models" / GetParam();
  if (!std::filesystem::exists(dir / "goldens.safetensors")) GTEST_SKIP() << "no " << GetParam();
  const ModelConfig c = load_model_config(dir);
  const SafeTensors gold = SafeTensors::open(dir / "goldens.safetensors");
  const SafeTensors weights = SafeTensors::open(dir / "model.safetensors");
  Context ctx(Device::cpu());
  const MoeGroupRouting p{c.n_group, c.topk_group, c.norm_topk_prob,
                          static_cast<float>(c.routed_scaling_factor)};
  int checked = 0;
  for (int i = 0; i < 3; ++i) {
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string g = fmt::format("p{}.router{}.", i, l);
      ASSERT_EQ(gold.contains(g + "logits"), static_cast<bool>(c.layer_moe[static_cast<size_t>(l)]))
          << g;
      if (!gold.contains(g + "logits")) continue;
      const std::vector<float> bias = to_vector<float>(
          weights.get(fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", l)));
      const Routed got = route_grouped(ctx, gold.get(g + "logits"), bias, c.num_experts_per_tok, p);
      EXPECT_EQ(got.ids, to_vector<int32_t>(gold.get(g + "ids"))) << g;
      EXPECT_LE(test::max_abs_error(got.weights, to_vector<float>(gold.get(g + "weights"))), 1e-6)
          << g;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 9);  // 3 prompts x 3 MoE layers
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OpsMoeGrouped, ::testing::Values("deepseek_v3", "glm4_moe"));

TEST(OpsMoe, RouteGroupedRefusesBadArguments) {
  Context ctx(Device::cpu());
  const OwnedTensor logits = random_tensor(DType::f32, Shape{3, 8}, 1, 1.0f);
  const OwnedTensor bias = OwnedTensor::zeros(DType::f32, Shape{8}, Device::cpu());
  const OwnedTensor bias7 = OwnedTensor::zeros(DType::f32, Shape{7}, Device::cpu());
  OwnedTensor ids(DType::i32, Shape{3, 2}, Device::cpu());
  OwnedTensor w(DType::f32, Shape{3, 2}, Device::cpu());
  EXPECT_NO_THROW(moe_route_grouped(ctx, logits, bias, MoeGroupRouting{4, 2, true, 1}, ids, w));
  EXPECT_THROW(moe_route_grouped(ctx, logits, bias7, MoeGroupRouting{4, 2, true, 1}, ids, w),
               Error);  // bias of 7 for 8 experts
  EXPECT_THROW(moe_route_grouped(ctx, logits, bias, MoeGroupRouting{3, 2, true, 1}, ids, w),
               Error);  // 3 groups do not divide 8
  EXPECT_THROW(moe_route_grouped(ctx, logits, bias, MoeGroupRouting{8, 2, true, 1}, ids, w),
               Error);  // groups of 1
  EXPECT_THROW(moe_route_grouped(ctx, logits, bias, MoeGroupRouting{4, 5, true, 1}, ids, w),
               Error);  // topk_group > n_group
  OwnedTensor ids5(DType::i32, Shape{3, 5}, Device::cpu());
  OwnedTensor w5(DType::f32, Shape{3, 5}, Device::cpu());
  EXPECT_THROW(moe_route_grouped(ctx, logits, bias, MoeGroupRouting{4, 2, true, 1}, ids5, w5),
               Error);  // k = 5 > the 4 experts of 2 groups
}

TEST(OpsMoe, RefusesBadArguments) {
  Context ctx(Device::cpu());
  const OwnedTensor logits = random_tensor(DType::f32, Shape{3, 4}, 1, 1.0f);
  OwnedTensor ids(DType::i32, Shape{3, 5}, Device::cpu());
  OwnedTensor w5(DType::f32, Shape{3, 5}, Device::cpu());
  EXPECT_THROW(moe_route(ctx, logits, false, ids, w5), Error);  // k = 5 > 4 experts
  OwnedTensor ids2(DType::i32, Shape{3, 2}, Device::cpu());
  OwnedTensor w_bad(DType::bf16, Shape{3, 2}, Device::cpu());
  EXPECT_THROW(moe_route(ctx, logits, false, ids2, w_bad), Error);  // weights not f32
  OwnedTensor w_rows(DType::f32, Shape{2, 2}, Device::cpu());
  EXPECT_THROW(moe_route(ctx, logits, false, ids2, w_rows), Error);  // rows differ
  OwnedTensor out(DType::f32, Shape{3, 8}, Device::cpu());
  OwnedTensor w2(DType::f32, Shape{3, 2}, Device::cpu());
  EXPECT_THROW(moe_combine(ctx, logits, ids2, w2, out), Error);  // 4 vs 8 columns
}

}  // namespace
}  // namespace dspark
