// qkv_prologue's K/V-only form (n_heads 0: a DSpark drafter's context rows) on the CPU: it writes
// the same K and V pages as the full call whose q heads precede the same k and v heads, leaves
// q_out alone and returns an undefined tensor; and the argument checks of that form. The fused
// CUDA kernel is compared with these CPU results in tests/cuda/qkv_prologue_test.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/qkv_prologue.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace {

constexpr int64_t kTokens = 5;
constexpr int kHeads = 4, kKvHeads = 2, kHeadDim = 64;

struct Pages {
  OwnedTensor k, v;
};

Pages old_pages(uint32_t seed) {
  return {test::random_tensor(DType::f32, Shape{4, 8, kKvHeads, kHeadDim}, seed),
          test::random_tensor(DType::f32, Shape{4, 8, kKvHeads, kHeadDim}, seed + 1)};
}

TEST(OpsQkvPrologue, KvOnlyWritesTheFullCallsKAndV) {
  Context ctx(Device::cpu());
  const int64_t qw = int64_t{kHeads} * kHeadDim, kvw = int64_t{kKvHeads} * kHeadDim;
  const OwnedTensor full = test::random_tensor(DType::f32, Shape{kTokens, qw + 2 * kvw}, 7);
  // The k and v heads of `full`, alone: [kTokens, 2 * kvw].
  OwnedTensor kv_only = OwnedTensor::zeros(DType::f32, Shape{kTokens, 2 * kvw}, Device::cpu());
  for (int64_t t = 0; t < kTokens; ++t) {
    std::memcpy(static_cast<float*>(kv_only->data()) + t * 2 * kvw,
                static_cast<const float*>(full->data()) + t * (qw + 2 * kvw) + qw,
                static_cast<size_t>(2 * kvw) * sizeof(float));
  }
  const OwnedTensor k_norm = test::random_tensor(DType::f32, Shape{kHeadDim}, 9);
  const OwnedTensor q_norm = test::random_tensor(DType::f32, Shape{kHeadDim}, 10);
  const RopeTable table = make_rope_table(kHeadDim, 1e6, 1.0, RopeScaling{}, 32768);
  const OwnedTensor inv_freq =
      OwnedTensor::from_vector(table.inv_freq, Shape{kHeadDim / 2}, Device::cpu());
  const OwnedTensor pos = OwnedTensor::from_vector(std::vector<int32_t>{0, 7, 8, 30, 31},
                                                   Shape{kTokens}, Device::cpu());
  const OwnedTensor slots = OwnedTensor::from_vector(std::vector<int32_t>{1, 2, 9, 17, 30},
                                                     Shape{kTokens}, Device::cpu());

  auto args = [&](const Tensor& qkv, int heads, const Pages& pages, const Tensor& q_out,
                  const Tensor& k_tmp) {
    QkvPrologueArgs a;
    a.qkv = qkv;
    a.n_heads = heads;
    a.n_kv_heads = kKvHeads;
    a.head_dim = kHeadDim;
    if (heads > 0) a.q_norm = q_norm.view();
    a.k_norm = k_norm.view();
    a.norm = RmsNormParams{1e-6f, false};
    a.positions = pos.view();
    a.inv_freq = inv_freq.view();
    a.attention_scaling = table.attention_scaling;
    a.slots = slots.view();
    a.k_pages = pages.k.view();
    a.v_pages = pages.v.view();
    a.q_out = q_out;
    a.k_tmp = k_tmp;
    return a;
  };
  const Pages want = old_pages(20), got = old_pages(20);
  const OwnedTensor q_out = OwnedTensor::zeros(DType::f32, Shape{kTokens, qw}, Device::cpu());
  const OwnedTensor k_tmp = OwnedTensor::zeros(DType::f32, Shape{kTokens, kvw}, Device::cpu());
  const Tensor q = qkv_prologue(ctx, args(full.view(), kHeads, want, q_out.view(), k_tmp.view()));
  EXPECT_TRUE(q.defined());

  const OwnedTensor untouched = test::random_tensor(DType::f32, Shape{kTokens, qw}, 30);
  const std::vector<float> untouched_before = to_f32_vector(untouched);
  const OwnedTensor k_tmp2 = OwnedTensor::zeros(DType::f32, Shape{kTokens, kvw}, Device::cpu());
  const Tensor none =
      qkv_prologue(ctx, args(kv_only.view(), 0, got, untouched.view(), k_tmp2.view()));
  EXPECT_FALSE(none.defined());
  EXPECT_EQ(to_f32_vector(got.k), to_f32_vector(want.k));
  EXPECT_EQ(to_f32_vector(got.v), to_f32_vector(want.v));
  EXPECT_EQ(to_f32_vector(untouched), untouched_before);
  // The pages did change (the test would pass trivially otherwise).
  EXPECT_NE(to_f32_vector(got.k), to_f32_vector(old_pages(20).k));

  // K/V only: qkv must be [n, 2 * n_kv_heads * head_dim]; negative q heads are refused.
  const Pages scratch = old_pages(40);
  EXPECT_THROW(qkv_prologue(ctx, args(full.view(), 0, scratch, Tensor{}, k_tmp2.view())), Error);
  EXPECT_THROW(qkv_prologue(ctx, args(kv_only.view(), -1, scratch, Tensor{}, k_tmp2.view())),
               Error);
  // An undefined q_out is fine without q heads (the drafter passes none).
  EXPECT_NO_THROW(qkv_prologue(ctx, args(kv_only.view(), 0, scratch, Tensor{}, k_tmp2.view())));
}

}  // namespace
}  // namespace dspark
