// moe_group and moe_linear on the CPU against direct references: the grouping is a stable sort of
// the (token, choice) pairs by expert; each grouped row times its expert's matrix (also with the
// rows read through the grouping, moe_linear_gather).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/moe.h"

namespace dspark {
namespace {

using test::random_expert_choices;
using test::random_tensor;

struct Groups {
  OwnedTensor offsets, active, order, slots;
  Groups(int64_t n, int64_t experts, int64_t k)
      : offsets(DType::i32, Shape{experts + 1}, Device::cpu()),
        active(DType::i32, Shape{experts + 1}, Device::cpu()),
        order(DType::i32, Shape{n * k}, Device::cpu()),
        slots(DType::i32, Shape{n, k}, Device::cpu()) {}
  MoeGroups view() const { return {offsets, active, order, slots}; }
};

TEST(OpsMoeGroup, IsAStableSortByExpert) {
  Context ctx(Device::cpu());
  for (const auto [n, experts, k] :
       {std::array<int64_t, 3>{1, 8, 2}, {17, 16, 4}, {40, 64, 6}, {3, 5, 5}}) {
    SCOPED_TRACE(fmt::format("n={} E={} k={}", n, experts, k));
    const std::vector<int32_t> ids = random_expert_choices(n, experts, k, 7);
    const OwnedTensor t = OwnedTensor::from_vector(ids, Shape{n, k}, Device::cpu());
    Groups g(n, experts, k);
    moe_group(ctx, t, g.view());

    std::vector<int32_t> pairs(ids.size());
    std::iota(pairs.begin(), pairs.end(), 0);
    std::stable_sort(pairs.begin(), pairs.end(), [&](int32_t a, int32_t b) {
      return ids[static_cast<size_t>(a)] < ids[static_cast<size_t>(b)];
    });
    const std::vector<int32_t> order = to_vector<int32_t>(g.order.view()),
                               slots = to_vector<int32_t>(g.slots.view()),
                               offsets = to_vector<int32_t>(g.offsets.view()),
                               active = to_vector<int32_t>(g.active.view());
    std::vector<int32_t> want_active;
    for (size_t r = 0; r < pairs.size(); ++r) {
      const int32_t pair = pairs[r], e = ids[static_cast<size_t>(pair)];
      EXPECT_EQ(order[r], pair / k) << "row " << r;
      EXPECT_EQ(slots[static_cast<size_t>(pair)], static_cast<int32_t>(r)) << "pair " << pair;
      EXPECT_LE(offsets[static_cast<size_t>(e)], static_cast<int32_t>(r));
      EXPECT_GT(offsets[static_cast<size_t>(e) + 1], static_cast<int32_t>(r));
      if (want_active.empty() || want_active.back() != e) want_active.push_back(e);
    }
    EXPECT_EQ(offsets.front(), 0);
    EXPECT_EQ(offsets.back(), static_cast<int32_t>(n * k));
    ASSERT_EQ(active[0], static_cast<int32_t>(want_active.size()));
    EXPECT_TRUE(std::equal(want_active.begin(), want_active.end(), active.begin() + 1));
  }
}

TEST(OpsMoeGroup, LinearMultipliesEachRowByItsExpert) {
  Context ctx(Device::cpu());
  const int64_t n = 9, experts = 6, k = 3, rows = 5, cols = 24;
  const std::vector<int32_t> ids = random_expert_choices(n, experts, k, 3);
  const OwnedTensor t = OwnedTensor::from_vector(ids, Shape{n, k}, Device::cpu());
  Groups g(n, experts, k);
  moe_group(ctx, t, g.view());
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const OwnedTensor x = random_tensor(dtype, Shape{n * k, cols}, 5, 1.0f);
    const OwnedTensor w = random_tensor(dtype, Shape{experts * rows, cols}, 6, 1.0f);
    OwnedTensor y(DType::f32, Shape{n * k, rows}, Device::cpu());
    moe_linear(ctx, x, WeightMatrix::dense(w), g.view(), y);
    const std::vector<float> xv = to_f32_vector(x.view()), wv = to_f32_vector(w.view()),
                             yv = to_f32_vector(y.view());
    const std::vector<int32_t> offsets = to_vector<int32_t>(g.offsets.view());
    std::vector<float> ref(yv.size());
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t r = offsets[static_cast<size_t>(e)]; r < offsets[static_cast<size_t>(e) + 1];
           ++r) {
        for (int64_t o = 0; o < rows; ++o) {
          double s = 0.0;
          for (int64_t c = 0; c < cols; ++c)
            s += static_cast<double>(xv[static_cast<size_t>(r * cols + c)]) *
                 wv[static_cast<size_t>((e * rows + o) * cols + c)];
          ref[static_cast<size_t>(r * rows + o)] = static_cast<float>(s);
        }
      }
    }
    EXPECT_LE(test::max_abs_error(yv, ref), 1e-4);
  }
}

// moe_linear_gather reads row r of the product from the token row order[r]: the same as the
// gathered copy times the experts (and it leaves that copy in `rows` on the CPU).
TEST(OpsMoeGroup, LinearGatherEqualsGatherThenLinear) {
  Context ctx(Device::cpu());
  const int64_t n = 7, experts = 5, k = 2, rows = 6, cols = 32;
  const std::vector<int32_t> ids = random_expert_choices(n, experts, k, 11);
  const OwnedTensor t = OwnedTensor::from_vector(ids, Shape{n, k}, Device::cpu());
  Groups g(n, experts, k);
  moe_group(ctx, t, g.view());
  const OwnedTensor x = random_tensor(DType::f32, Shape{n, cols}, 12, 1.0f);
  const OwnedTensor w = random_tensor(DType::f32, Shape{experts * rows, cols}, 13, 1.0f);
  OwnedTensor gathered(DType::f32, Shape{n * k, cols}, Device::cpu());
  OwnedTensor rows_buf(DType::f32, Shape{n * k, cols}, Device::cpu());
  OwnedTensor y_ref(DType::f32, Shape{n * k, rows}, Device::cpu());
  OwnedTensor y(DType::f32, Shape{n * k, rows}, Device::cpu());
  const std::vector<float> xv = to_f32_vector(x.view());
  const std::vector<int32_t> order = to_vector<int32_t>(g.order.view());
  std::vector<float> gv(static_cast<size_t>(n * k * cols));
  for (int64_t r = 0; r < n * k; ++r)
    std::copy_n(xv.begin() + order[static_cast<size_t>(r)] * cols, cols, gv.begin() + r * cols);
  const OwnedTensor gathered_ref = OwnedTensor::from_vector(gv, Shape{n * k, cols}, Device::cpu());
  moe_linear(ctx, gathered_ref, WeightMatrix::dense(w), g.view(), y_ref);
  moe_linear_gather(ctx, x, rows_buf, WeightMatrix::dense(w), g.view(), y);
  EXPECT_EQ(to_f32_vector(y.view()), to_f32_vector(y_ref.view()));
  EXPECT_EQ(to_f32_vector(rows_buf.view()), gv);
}

// moe_linear_swiglu: SwiGLU's rows (left in act on the CPU) times the experts.
TEST(OpsMoeGroup, LinearSwigluEqualsSwigluThenLinear) {
  Context ctx(Device::cpu());
  const int64_t n = 5, experts = 4, k = 2, rows = 3, inter = 16;
  const std::vector<int32_t> ids = random_expert_choices(n, experts, k, 21);
  const OwnedTensor t = OwnedTensor::from_vector(ids, Shape{n, k}, Device::cpu());
  Groups g(n, experts, k);
  moe_group(ctx, t, g.view());
  const OwnedTensor gate_up = random_tensor(DType::f32, Shape{n * k, 2 * inter}, 22, 1.0f);
  const OwnedTensor w = random_tensor(DType::f32, Shape{experts * rows, inter}, 23, 1.0f);
  OwnedTensor act(DType::f32, Shape{n * k, inter}, Device::cpu());
  OwnedTensor act_ref(DType::f32, Shape{n * k, inter}, Device::cpu());
  OwnedTensor y(DType::f32, Shape{n * k, rows}, Device::cpu());
  OwnedTensor y_ref(DType::f32, Shape{n * k, rows}, Device::cpu());
  const Tensor gu = gate_up;
  swiglu(ctx, gu.slice(1, 0, inter), gu.slice(1, inter, 2 * inter), act_ref);
  moe_linear(ctx, act_ref, WeightMatrix::dense(w), g.view(), y_ref);
  moe_linear_swiglu(ctx, gate_up, act, WeightMatrix::dense(w), g.view(), y);
  EXPECT_EQ(to_f32_vector(y.view()), to_f32_vector(y_ref.view()));
  EXPECT_EQ(to_f32_vector(act.view()), to_f32_vector(act_ref.view()));
}

TEST(OpsMoeGroup, RefusesBadArguments) {
  Context ctx(Device::cpu());
  const OwnedTensor ids =
      OwnedTensor::from_vector(std::vector<int32_t>{0, 1, 2, 3}, Shape{2, 2}, Device::cpu());
  Groups small(2, 4, 2);
  Groups wrong_slots(4, 4, 1);  // slots [4, 1] for ids [2, 2]
  EXPECT_THROW(
      moe_group(ctx, ids, MoeGroups{small.offsets, small.active, small.order, wrong_slots.slots}),
      Error);
  moe_group(ctx, ids, small.view());
  const OwnedTensor x = random_tensor(DType::f32, Shape{4, 8}, 1, 1.0f);
  const OwnedTensor w7 = random_tensor(DType::f32, Shape{7, 8}, 2, 1.0f);  // 7 rows, 4 experts
  OwnedTensor y(DType::f32, Shape{4, 2}, Device::cpu());
  EXPECT_THROW(moe_linear(ctx, x, WeightMatrix::dense(w7), small.view(), y), Error);
  const OwnedTensor w = random_tensor(DType::f32, Shape{8, 6}, 3, 1.0f);  // K 6 != 8
  EXPECT_THROW(moe_linear(ctx, x, WeightMatrix::dense(w), small.view(), y), Error);
}

}  // namespace
}  // namespace dspark
