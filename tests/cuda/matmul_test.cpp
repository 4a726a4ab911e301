// linear (cuBLASLt) vs the CPU (OpenBLAS sgemm on the same inputs converted to f32).
// Tolerances (relative RMS): f32 in/out 1e-5 (no TF32); 16-bit inputs with f32 output 1e-4 (exact
// products, f32 sums in another order); bf16 output 1e-2, f16 output 2e-3 (one output rounding).
#include "dspark/ops/matmul.h"
#include <cstdio>
#include <vector>

#include "dspark/backend/cuda/kernels.h"

#include "cuda/cuda_consistency.h"
#include "cuda/linear_paths.h"

namespace dspark::test {
namespace {

struct Gemm {
  int64_t m, n, k;
};
constexpr Gemm kShapes[] = {{1, 1, 1},      {1, 256, 512},  {7, 33, 65},
                            {64, 128, 256}, {130, 257, 96}, {3, 1000, 1024}};

struct Types {
  DType in, out;
};
constexpr Types kTypes[] = {{DType::f32, DType::f32},
                            {DType::bf16, DType::bf16},
                            {DType::bf16, DType::f32},
                            {DType::f16, DType::f16},
                            {DType::f16, DType::f32}};

double linear_tolerance(Types t) {
  if (t.out != DType::f32) return tolerance(t.out);
  return t.in == DType::f32 ? 1e-5 : 1e-4;
}

TEST(CudaMatmul, LinearMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1000;
  for (const Types t : kTypes) {
    for (const Gemm g : kShapes) {
      for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {  // none, input dtype, f32
        const Pair x = random_pair(t.in, Shape{g.m, g.k}, seed++);
        const Pair w = random_pair(t.in, Shape{g.n, g.k}, seed++, 0.05f);
        const Pair bias = random_pair(bias_kind == 2 ? DType::f32 : t.in, Shape{g.n}, seed++);
        const Pair y = zeros_pair(t.out, Shape{g.m, g.n});
        const Tensor no_bias;
        linear(ctx.cpu, x.cpu, w.cpu, bias_kind ? bias.cpu.view() : no_bias, y.cpu);
        linear(ctx.gpu, x.gpu, w.gpu, bias_kind ? bias.gpu.view() : no_bias, y.gpu);
        ctx.gpu.synchronize();
        expect_close(y.gpu, y.cpu, linear_tolerance(t),
                     name_of(t.in) + " -> " + name_of(t.out) + " M=" + std::to_string(g.m) +
                         " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) + " bias " +
                         std::to_string(bias_kind));
      }
    }
  }
}

// x and y rows inside wider buffers (leading dimensions > K / N, unaligned offsets): only the
// y view may change.
TEST(CudaMatmul, LinearStridedRows) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 2000;
  for (const Types t : kTypes) {
    for (const Gemm g : {Gemm{5, 40, 64}, Gemm{33, 72, 200}}) {
      const Pair xbuf = random_pair(t.in, Shape{g.m, g.k + 5}, seed++);
      const Pair w = random_pair(t.in, Shape{g.n, g.k}, seed++, 0.05f);
      const Pair ybuf = random_pair(t.out, Shape{g.m, g.n + 11}, seed++);
      const Tensor no_bias;
      linear(ctx.cpu, columns(xbuf.cpu, 3, g.k), w.cpu, no_bias, columns(ybuf.cpu, 2, g.n));
      linear(ctx.gpu, columns(xbuf.gpu, 3, g.k), w.gpu, no_bias, columns(ybuf.gpu, 2, g.n));
      ctx.gpu.synchronize();
      expect_close(
          ybuf.gpu, ybuf.cpu, linear_tolerance(t),
          "strided " + name_of(t.in) + " -> " + name_of(t.out) + " M=" + std::to_string(g.m));
    }
  }
}

// Repeated calls with the same shape reuse the cached plan and must give identical results.
TEST(CudaMatmul, CachedPlanIsDeterministic) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Pair x = random_pair(DType::bf16, Shape{17, 512}, 1);
  const Pair w = random_pair(DType::bf16, Shape{384, 512}, 2, 0.05f);
  const Pair y1 = zeros_pair(DType::bf16, Shape{17, 384});
  const Pair y2 = zeros_pair(DType::bf16, Shape{17, 384});
  linear(ctx.gpu, x.gpu, w.gpu, Tensor(), y1.gpu);
  linear(ctx.gpu, x.gpu, w.gpu, Tensor(), y2.gpu);
  ctx.gpu.synchronize();
  expect_equal(y2.gpu, y1.gpu, "second call");
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // the cuBLASLt plan choice itself
// Autotuned plans (backend/cuda/lt_plans.h): up to 8 heuristic candidates timed per new shape at
// decode / verify shapes of a Qwen3-8B layer; the kept algorithm still matches the CPU, repeats
// are bitwise equal, and the log records a valid choice (the fastest timed: never slower than the
// heuristic's first) for every autotuned shape. Turning it off forgets the plans again.
TEST(CudaMatmul, AutotunedPlansMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  const ScopedLinearPaths cublas_only(false, false);  // M = 1 would take the one-row kernel
  Contexts ctx;
  cuda::set_linear_autotune(8);
  const size_t before = cuda::linear_plan_log().size();
  uint32_t seed = 3000;
  for (const Gemm g : {Gemm{1, 4096, 4096}, Gemm{1, 6144, 4096}, Gemm{17, 4096, 12288},
                       Gemm{16, 1024, 4096}, Gemm{3, 1000, 1024}}) {
    const Pair x = random_pair(DType::bf16, Shape{g.m, g.k}, seed++);
    const Pair w = random_pair(DType::bf16, Shape{g.n, g.k}, seed++, 0.05f);
    const Pair y = zeros_pair(DType::bf16, Shape{g.m, g.n});
    const Pair y2 = zeros_pair(DType::bf16, Shape{g.m, g.n});
    linear(ctx.cpu, x.cpu, w.cpu, Tensor(), y.cpu);
    linear(ctx.gpu, x.gpu, w.gpu, Tensor(), y.gpu);
    linear(ctx.gpu, x.gpu, w.gpu, Tensor(), y2.gpu);
    ctx.gpu.synchronize();
    const std::string name =
        "M=" + std::to_string(g.m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k);
    expect_close(y.gpu, y.cpu, tolerance(DType::bf16), "autotuned " + name);
    expect_equal(y2.gpu, y.gpu, "autotuned, second call " + name);
  }
  const std::vector<cuda::LinearPlanRecord> log = cuda::linear_plan_log();
  ASSERT_GT(log.size(), before) << "no shape had more than one candidate";
  for (size_t i = before; i < log.size(); ++i) {
    const cuda::LinearPlanRecord& r = log[i];
    EXPECT_GT(r.candidates, 1);
    EXPECT_GE(r.chosen, 0);
    EXPECT_LT(r.chosen, r.candidates);
    EXPECT_GT(r.chosen_us, 0.0);
    if (r.heuristic_us > 0.0) {
      EXPECT_LE(r.chosen_us, r.heuristic_us);
    }
    std::printf(
        "[ autotune ] M=%lld N=%lld K=%lld: %d candidates, first %.1f us (split-K %d), "
        "chosen #%d %.1f us (split-K %d, reduction %u)\n",
        static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
        r.candidates, r.heuristic_us, r.heuristic_splitk, r.chosen, r.chosen_us, r.splitk,
        r.reduction);
  }
  cuda::set_linear_autotune(0);
  EXPECT_EQ(cuda::linear_autotune(), 0);
}
#endif

}  // namespace
}  // namespace dspark::test
