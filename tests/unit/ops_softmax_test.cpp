// softmax, log_softmax and argmax against naive double-precision references.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/softmax.h"

namespace dspark {
namespace {

using test::max_abs_error;
using test::random_tensor;
using test::relative_rms_error;

TEST(OpsSoftmax, SoftmaxAndLogSoftmaxMatchDoubleReference) {
  Context ctx(Device::cpu());
  for (int64_t v : {1, 3, 17, 127, 4099}) {
    for (int64_t n : {1, 2, 33}) {
      for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE(fmt::format("n={} V={} dtype={}", n, v, dtype_name(dtype)));
        OwnedTensor buf = random_tensor(dtype, Shape{n, v + 4}, 40 + v + n, 4.0f);
        const Tensor x = buf.view().slice(1, 2, v + 2);  // strided rows, offset start
        OwnedTensor p(DType::f32, Shape{n, v}, Device::cpu());
        OwnedTensor lp(DType::f32, Shape{n, v}, Device::cpu());
        softmax(ctx, x, p);
        log_softmax(ctx, x, lp);
        const std::vector<float> xv = to_f32_vector(x);
        std::vector<float> ref_p(xv.size()), ref_lp(xv.size());
        for (int64_t r = 0; r < n; ++r) {
          double m = -INFINITY, s = 0;
          for (int64_t i = 0; i < v; ++i) m = std::max(m, static_cast<double>(xv[r * v + i]));
          for (int64_t i = 0; i < v; ++i) s += std::exp(xv[r * v + i] - m);
          for (int64_t i = 0; i < v; ++i) {
            ref_p[r * v + i] = static_cast<float>(std::exp(xv[r * v + i] - m) / s);
            ref_lp[r * v + i] = static_cast<float>(xv[r * v + i] - m - std::log(s));
          }
        }
        EXPECT_LE(relative_rms_error(to_f32_vector(p), ref_p), 1e-6);
        // log-probabilities near 0 make relative error meaningless: absolute 1e-5.
        EXPECT_LE(max_abs_error(to_f32_vector(lp), ref_lp), 1e-5);
      }
    }
  }
}

TEST(OpsSoftmax, MinusInfinityEntries) {
  Context ctx(Device::cpu());
  const std::vector<float> x = {-INFINITY, 0.0f, -INFINITY, std::log(3.0f)};
  OwnedTensor t = OwnedTensor::from_vector(x, Shape{1, 4}, Device::cpu());
  OwnedTensor p(DType::f32, Shape{1, 4}, Device::cpu());
  OwnedTensor lp(DType::f32, Shape{1, 4}, Device::cpu());
  softmax(ctx, t, p);
  log_softmax(ctx, t, lp);
  const auto pv = to_f32_vector(p), lpv = to_f32_vector(lp);
  EXPECT_EQ(pv[0], 0.0f);
  EXPECT_NEAR(pv[1], 0.25f, 1e-7);
  EXPECT_NEAR(pv[3], 0.75f, 1e-7);
  EXPECT_EQ(lpv[2], -INFINITY);
  EXPECT_NEAR(lpv[1], std::log(0.25), 1e-6);
}

TEST(OpsSoftmax, ArgmaxTiesNanAndRandom) {
  Context ctx(Device::cpu());
  const float nan = NAN;
  const std::vector<float> rows = {
      1.0f,      3.0f,      3.0f,      2.0f,       // tie: smallest index (1)
      nan,       -5.0f,     nan,       -7.0f,      // NaN never chosen (1)
      nan,       nan,       nan,       nan,        // all NaN: 0
      -INFINITY, -INFINITY, -INFINITY, -INFINITY,  // all -inf: first (0)
      nan,       -INFINITY, 2.0f,      2.0f,       // 2
  };
  OwnedTensor x = OwnedTensor::from_vector(rows, Shape{5, 4}, Device::cpu());
  OwnedTensor out(DType::i32, Shape{5}, Device::cpu());
  argmax(ctx, x, out);
  EXPECT_EQ(to_vector<int32_t>(out), (std::vector<int32_t>{1, 1, 0, 0, 2}));

  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t v : {1, 3, 17, 4099}) {
      OwnedTensor r = random_tensor(dtype, Shape{33, v}, 77 + v);
      OwnedTensor o(DType::i32, Shape{33}, Device::cpu());
      argmax(ctx, r, o);
      const auto rv = to_f32_vector(r);
      const auto ov = to_vector<int32_t>(o);
      for (int64_t i = 0; i < 33; ++i) {
        int64_t best = 0;
        for (int64_t j = 1; j < v; ++j)
          if (rv[i * v + j] > rv[i * v + best]) best = j;
        ASSERT_EQ(ov[i], best) << "row " << i << " V " << v << " " << dtype_name(dtype);
      }
    }
  }
}

// index_map: out[r] = map[argmax] (a draft vocabulary's columns -> token ids).
TEST(OpsSoftmax, ArgmaxThroughIndexMap) {
  Context ctx(Device::cpu());
  const std::vector<float> rows = {0.5f, 2.0f, -1.0f,  // 1 -> 40
                                   3.0f, 3.0f, 1.0f};  // tie: 0 -> 7
  OwnedTensor x = OwnedTensor::from_vector(rows, Shape{2, 3}, Device::cpu());
  OwnedTensor map =
      OwnedTensor::from_vector(std::vector<int32_t>{7, 40, 1000}, Shape{3}, Device::cpu());
  OwnedTensor out(DType::i32, Shape{2}, Device::cpu());
  argmax(ctx, x, out, map);
  EXPECT_EQ(to_vector<int32_t>(out), (std::vector<int32_t>{40, 7}));
  OwnedTensor map_short(DType::i32, Shape{2}, Device::cpu());
  OwnedTensor map_f32(DType::f32, Shape{3}, Device::cpu());
  EXPECT_THROW(argmax(ctx, x, out, map_short), Error);
  EXPECT_THROW(argmax(ctx, x, out, map_f32), Error);
}

TEST(OpsSoftmax, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor x = random_tensor(DType::f32, Shape{4, 8}, 1);
  OwnedTensor out_bf16(DType::bf16, Shape{4, 8}, Device::cpu());
  OwnedTensor out_bad(DType::f32, Shape{4, 9}, Device::cpu());
  EXPECT_THROW(softmax(ctx, x, out_bf16), Error);
  EXPECT_THROW(log_softmax(ctx, x, out_bad), Error);
  OwnedTensor idx64(DType::i64, Shape{4}, Device::cpu());
  OwnedTensor idx_short(DType::i32, Shape{3}, Device::cpu());
  EXPECT_THROW(argmax(ctx, x, idx64), Error);
  EXPECT_THROW(argmax(ctx, x, idx_short), Error);
  OwnedTensor ints(DType::i32, Shape{4, 8}, Device::cpu());
  OwnedTensor idx(DType::i32, Shape{4}, Device::cpu());
  EXPECT_THROW(argmax(ctx, ints, idx), Error);
}

}  // namespace
}  // namespace dspark
