// The op profiler (backend/op_profile.h) on CUDA: with profiling on, each op launched through
// ops/ shows up once per call under its name with a positive device time; with it off, or while
// a CUDA graph is captured, nothing is recorded.
#include "dspark/backend/op_profile.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

#if !defined(DSPARK_CONSISTENCY_ON_CPU)
TEST(CudaOpProfile, CountsCallsPerOp) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Pair x = random_pair(DType::bf16, Shape{4, 256}, 1);
  const Pair w = random_pair(DType::bf16, Shape{512, 256}, 2, 0.05f);
  const Pair y = zeros_pair(DType::bf16, Shape{4, 512});
  (void)take_op_profile();
  linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, y.gpu);  // profiling off: not recorded
  set_op_profiling(true);
  for (int i = 0; i < 3; ++i) linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, y.gpu);
  add(ctx.gpu, y.gpu, y.gpu, y.gpu);
  linear(ctx.cpu, x.cpu, w.cpu, Tensor{}, y.cpu);  // CPU contexts: not recorded
  set_op_profiling(false);
  const std::vector<OpTime> ops = take_op_profile();
  ASSERT_EQ(ops.size(), 2u);
  for (const OpTime& t : ops) {
    EXPECT_EQ(t.calls, t.op == "linear" ? 3 : 1) << t.op;
    EXPECT_TRUE(t.op == "linear" || t.op == "add") << t.op;
    EXPECT_GT(t.ms, 0.0) << t.op;
  }
  EXPECT_TRUE(take_op_profile().empty()) << "taken once";
}
#endif

}  // namespace
}  // namespace dspark::test
