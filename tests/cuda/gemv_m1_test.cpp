// The one-row CUDA-core linear path (backend/cuda/kernels/gemv_m1.cu: M == 1, 16-bit weights,
// K % 8 == 0, K <= 16,384, N <= 65,536; the default) against the CPU on the same rounded inputs: K
// from one 16-byte chunk up to the kernel's limit, so one to four chunks per lane and warps with a
// partial or empty share of K; N below, at and above every row-tile size (4, 8, 16) and past the
// grid's first pass; both output dtypes, with and without a bias. Then its own properties: the same
// bits on every call (no atomics, a fixed summation order) and the switch (off: cuBLASLt, within
// rounding).
#include <cstring>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

// The kernel's CTAs of 16 warps (the default), then of 8 (set_m1_half_ctas_max_n: every N, K <=
// 8,192; the larger K keep 16 warps).
class CudaGemvM1Ctas : public ::testing::TestWithParam<bool> {};

TEST_P(CudaGemvM1Ctas, OneRowMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  cuda::set_m1_linear(true);  // the default; on in case the environment turned it off
  const int64_t saved_half = cuda::m1_half_ctas_max_n();
  cuda::set_m1_half_ctas_max_n(GetParam() ? int64_t{1} << 20 : 0);
#else
  if (GetParam()) GTEST_SKIP() << "a CUDA switch";
#endif
  Contexts ctx;
  uint32_t seed = 9000;
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {in, DType::f32}) {
      // 8: one chunk; 1032: warps with one chunk, some lanes idle; 4096: one chunk per lane (16-row
      // tiles); 4392: two per lane (8-row tiles); 12288 (a down projection): three; 16384: four.
      for (int64_t k : {8, 1032, 4096, 4392, 12288, 16384}) {
        for (int64_t n : {1, 5, 16, 17, 4099}) {
          const Pair x = random_pair(in, Shape{1, k}, seed++);
          const Pair w = random_pair(in, Shape{n, k}, seed++, 0.05f);
          const Pair bias = random_pair(DType::f32, Shape{n}, seed++);
          const Pair y = zeros_pair(out, Shape{1, n});
          const bool with_bias = n % 2 == 1;
          const Tensor no_bias;
          linear(ctx.cpu, x.cpu, w.cpu, with_bias ? bias.cpu.view() : no_bias, y.cpu);
          linear(ctx.gpu, x.gpu, w.gpu, with_bias ? bias.gpu.view() : no_bias, y.gpu);
          ctx.gpu.synchronize();
          expect_close(y.gpu, y.cpu, out == DType::f32 ? 1e-4 : tolerance(out),
                       name_of(in) + " -> " + name_of(out) + " N=" + std::to_string(n) +
                           " K=" + std::to_string(k));
        }
      }
    }
  }
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  cuda::set_m1_half_ctas_max_n(saved_half);
#endif
}

INSTANTIATE_TEST_SUITE_P(Warps, CudaGemvM1Ctas, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Half" : "Full"; });

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // properties of the CUDA kernel itself
// Two calls give the same bits; the switch off routes through cuBLASLt (same values within
// rounding).
TEST(CudaGemvM1, DeterministicAndSwitchable) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const bool saved = cuda::m1_linear_enabled();
  const Pair x = random_pair(DType::bf16, Shape{1, 4096}, 9100);
  const Pair w = random_pair(DType::bf16, Shape{6144, 4096}, 9101, 0.05f);
  const Tensor row = x.gpu.view();
  const Pair a = zeros_pair(DType::f32, Shape{1, 6144}), b = zeros_pair(DType::f32, Shape{1, 6144});
  const Pair c = zeros_pair(DType::f32, Shape{1, 6144});
  cuda::set_m1_linear(true);
  linear(ctx.gpu, row, w.gpu, Tensor{}, a.gpu);
  linear(ctx.gpu, row, w.gpu, Tensor{}, b.gpu);
  cuda::set_m1_linear(false);
  linear(ctx.gpu, row, w.gpu, Tensor{}, c.gpu);
  ctx.gpu.synchronize();
  const OwnedTensor ha = OwnedTensor::copy_of(a.gpu.view(), Device::cpu());
  const OwnedTensor hb = OwnedTensor::copy_of(b.gpu.view(), Device::cpu());
  EXPECT_EQ(0, std::memcmp(ha.view().data(), hb.view().data(), 6144 * sizeof(float)))
      << "two calls of the one-row kernel differ";
  expect_close(a.gpu, c.gpu, 1e-4, "one-row kernel vs cuBLASLt");

  cuda::set_m1_linear(saved);
}
#endif

}  // namespace
}  // namespace dspark::test
