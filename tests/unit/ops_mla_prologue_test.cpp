// mla_prologue on the CPU: queries whose heads do not collapse into rows of one stride (q_proj's
// columns at the end of MLA's input projection, without a q LoRA) give the same bits as the same
// values in a contiguous [n, heads, qk] tensor; and the argument checks. The fused CUDA kernel is
// compared with these CPU results in tests/cuda/mla_prologue_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/mla_prologue.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace {

constexpr int64_t kTokens = 3, kHeads = 4, kR = 32, kRope = 8, kNope = 16, kLead = 40;
constexpr int64_t kLat = kR + kRope, kQk = kNope + kRope;

struct Fixture {
  OwnedTensor kv = test::random_tensor(DType::f32, Shape{kTokens, kLat}, 11);
  OwnedTensor norm = test::random_tensor(DType::f32, Shape{kR}, 12);
  OwnedTensor pos =
      OwnedTensor::from_vector(std::vector<int32_t>{0, 5, 9}, Shape{kTokens}, Device::cpu());
  OwnedTensor slots =
      OwnedTensor::from_vector(std::vector<int32_t>{1, 2, 6}, Shape{kTokens}, Device::cpu());
  OwnedTensor inv_freq;
  Fixture() {
    const RopeTable t = make_rope_table(static_cast<int>(kRope), 1e4, 1.0, RopeScaling{}, 4096);
    inv_freq = OwnedTensor::from_vector(t.inv_freq, Shape{kRope / 2}, Device::cpu());
  }
  MlaPrologueArgs args(const Tensor& q3, const Tensor& pages, const Tensor& latent,
                       const Tensor& q_out) const {
    MlaPrologueArgs a;
    a.kv = kv.view();
    a.kv_norm = norm.view();
    a.q_rope = q3.slice(2, kNope, kQk);
    a.positions = pos.view();
    a.inv_freq = inv_freq.view();
    a.slots = slots.view();
    a.pages = pages;
    a.latent = latent;
    a.q_out = q_out;
    return a;
  }
};

TEST(OpsMlaPrologue, WideQueriesEqualContiguousOnes) {
  Context ctx(Device::cpu());
  const Fixture f;
  const OwnedTensor wide =
      test::random_tensor(DType::f32, Shape{kTokens, kLead + kHeads * kQk}, 13);
  const Tensor wide_q3(static_cast<float*>(wide->data()) + kLead, DType::f32,
                       Shape{kTokens, kHeads, kQk}, Shape{kLead + kHeads * kQk, kQk, 1},
                       Device::cpu());
  OwnedTensor dense = OwnedTensor::zeros(DType::f32, Shape{kTokens, kHeads, kQk}, Device::cpu());
  for (int64_t t = 0; t < kTokens; ++t)
    std::memcpy(static_cast<float*>(dense->data()) + t * kHeads * kQk,
                static_cast<const float*>(wide->data()) + t * (kLead + kHeads * kQk) + kLead,
                static_cast<size_t>(kHeads * kQk) * sizeof(float));
  std::vector<std::vector<float>> q_outs, pools;
  for (const Tensor& q3 : {wide_q3, dense.view()}) {
    const OwnedTensor pages = test::random_tensor(DType::f32, Shape{2, 4, 1, kLat}, 14);
    const OwnedTensor latent = OwnedTensor::zeros(DType::f32, Shape{kTokens, kLat}, Device::cpu());
    const OwnedTensor q_out =
        OwnedTensor::zeros(DType::f32, Shape{kTokens, kHeads, kRope}, Device::cpu());
    mla_prologue(ctx, f.args(q3, pages.view(), latent.view(), q_out.view()));
    q_outs.push_back(to_f32_vector(q_out.view()));
    pools.push_back(to_f32_vector(pages.view()));
  }
  EXPECT_EQ(q_outs[0], q_outs[1]);
  EXPECT_EQ(pools[0], pools[1]);
}

TEST(OpsMlaPrologue, RejectsMismatchedShapes) {
  Context ctx(Device::cpu());
  const Fixture f;
  const OwnedTensor q = OwnedTensor::zeros(DType::f32, Shape{kTokens, kHeads, kQk}, Device::cpu());
  const OwnedTensor pages = OwnedTensor::zeros(DType::f32, Shape{2, 4, 1, kLat}, Device::cpu());
  const OwnedTensor latent = OwnedTensor::zeros(DType::f32, Shape{kTokens, kLat}, Device::cpu());
  const OwnedTensor q_out =
      OwnedTensor::zeros(DType::f32, Shape{kTokens, kHeads, kRope}, Device::cpu());
  EXPECT_NO_THROW(mla_prologue(ctx, f.args(q.view(), pages.view(), latent.view(), q_out.view())));
  // q_out of another width; pages whose rows are not the latent's; an odd rotated part.
  const OwnedTensor narrow =
      OwnedTensor::zeros(DType::f32, Shape{kTokens, kHeads, kRope - 2}, Device::cpu());
  EXPECT_THROW(mla_prologue(ctx, f.args(q.view(), pages.view(), latent.view(), narrow.view())),
               Error);
  const OwnedTensor wide_pages =
      OwnedTensor::zeros(DType::f32, Shape{2, 4, 1, kLat + 16}, Device::cpu());
  EXPECT_THROW(mla_prologue(ctx, f.args(q.view(), wide_pages.view(), latent.view(), q_out.view())),
               Error);
  MlaPrologueArgs odd = f.args(q.view(), pages.view(), latent.view(), q_out.view());
  odd.kv_norm = f.norm.view().slice(0, 0, kR - 1);
  EXPECT_THROW(mla_prologue(ctx, odd), Error);
}

}  // namespace
}  // namespace dspark
