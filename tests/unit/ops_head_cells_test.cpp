// markov_greedy_step's and markov_greedy_loop's contracts on the CPU: argument checks, and no fused
// path (they return false and touch nothing, so the Markov head runs gather + linear + add +
// argmax). The fused CUDA kernels are checked against a double reference in
// tests/cuda/dspark_cuda_test.cpp.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/head_cells.h"

namespace dspark {
namespace {

TEST(OpsHeadCells, MarkovGreedyStepHasNoCpuPathAndChecksArguments) {
  Context ctx(Device::cpu());
  const OwnedTensor w1 = test::random_tensor(DType::f32, Shape{50, 8}, 1);
  const OwnedTensor w2 = test::random_tensor(DType::f32, Shape{20, 8}, 2);
  const OwnedTensor z = test::random_tensor(DType::f32, Shape{2, 20}, 3);
  const std::vector<float> z_before = to_f32_vector(z);
  const OwnedTensor prev =
      OwnedTensor::from_vector(std::vector<int32_t>{3, 7}, Shape{2}, Device::cpu());
  const OwnedTensor next =
      OwnedTensor::from_vector(std::vector<int32_t>{-1, -1}, Shape{2}, Device::cpu());
  EXPECT_FALSE(markov_greedy_step(ctx, w1, w2, prev, z, next, Tensor{}));
  EXPECT_EQ(to_f32_vector(z), z_before);
  EXPECT_EQ(to_vector<int32_t>(next.view()), (std::vector<int32_t>{-1, -1}));

  const OwnedTensor w2_wrong_rank = test::random_tensor(DType::f32, Shape{20, 9}, 4);
  EXPECT_THROW(markov_greedy_step(ctx, w1, w2_wrong_rank, prev, z, next, Tensor{}), Error);
  const OwnedTensor w2_wrong_cols = test::random_tensor(DType::f32, Shape{21, 8}, 5);
  EXPECT_THROW(markov_greedy_step(ctx, w1, w2_wrong_cols, prev, z, next, Tensor{}), Error);
  const OwnedTensor z_bf16 = test::random_tensor(DType::bf16, Shape{2, 20}, 6);
  EXPECT_THROW(markov_greedy_step(ctx, w1, w2, prev, z_bf16, next, Tensor{}), Error);
  const OwnedTensor short_prev =
      OwnedTensor::from_vector(std::vector<int32_t>{3}, Shape{1}, Device::cpu());
  EXPECT_THROW(markov_greedy_step(ctx, w1, w2, short_prev, z, next, Tensor{}), Error);
  const OwnedTensor short_map =
      OwnedTensor::from_vector(std::vector<int32_t>{0, 1}, Shape{2}, Device::cpu());
  EXPECT_THROW(markov_greedy_step(ctx, w1, w2, prev, z, next, short_map), Error);
}

TEST(OpsHeadCells, MarkovGreedyLoopHasNoCpuPathAndChecksArguments) {
  Context ctx(Device::cpu());
  const OwnedTensor w1 = test::random_tensor(DType::f32, Shape{50, 8}, 1);
  const OwnedTensor w2 = test::random_tensor(DType::f32, Shape{20, 8}, 2);
  const OwnedTensor z = test::random_tensor(DType::f32, Shape{6, 20}, 3);  // 3 steps x 2 rows
  const std::vector<float> z_before = to_f32_vector(z);
  const std::vector<int32_t> tok{3, 7, -1, -1, -1, -1, -1, -1};
  const OwnedTensor tokens = OwnedTensor::from_vector(tok, Shape{8}, Device::cpu());
  EXPECT_FALSE(markov_greedy_loop(ctx, w1, w2, tokens, z, 2, 3, Tensor{}));
  EXPECT_EQ(to_f32_vector(z), z_before);
  EXPECT_EQ(to_vector<int32_t>(tokens.view()), tok);
  EXPECT_THROW(markov_greedy_loop(ctx, w1, w2, tokens, z, 2, 2, Tensor{}), Error);  // 4 != 6 rows
  EXPECT_THROW(markov_greedy_loop(ctx, w1, w2, tokens, z, 3, 2, Tensor{}), Error);  // 9 tokens
  const OwnedTensor w2_wrong_cols = test::random_tensor(DType::f32, Shape{21, 8}, 5);
  EXPECT_THROW(markov_greedy_loop(ctx, w1, w2_wrong_cols, tokens, z, 2, 3, Tensor{}), Error);
  const OwnedTensor short_map =
      OwnedTensor::from_vector(std::vector<int32_t>{0, 1}, Shape{2}, Device::cpu());
  EXPECT_THROW(markov_greedy_loop(ctx, w1, w2, tokens, z, 2, 3, short_map), Error);
}

}  // namespace
}  // namespace dspark
