// linear on CUDA (cuBLASLt; the one-row kernel for the aligned 16-bit M == 1 shapes, also in
// gemv_m1_test.cpp) vs the CPU (OpenBLAS sgemm on the same inputs converted to f32).
// Tolerances (relative RMS): f32 in/out 1e-5 (no TF32); 16-bit inputs with f32 output 1e-4 (exact
// products, f32 sums in another order); bf16 output 1e-2, f16 output 2e-3 (one output rounding).
#include "dspark/ops/matmul.h"

#include <string>
#include <vector>

#include "dspark/backend/cuda/policy/linear.h"

#include "cuda/cuda_consistency.h"

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

// M == 1 shapes that the one-row kernel declines (choose_linear, backend/cuda/policy/linear.h), so
// that cuBLASLt runs them: x not 16-byte aligned (a row read from column 1 of a wider buffer), N
// above the one-row kernel's widest (an LM head), K above its deepest, K not a multiple of 8;
// 16-bit inputs with a 16-bit output, and with an f32 output plus a bias.
TEST(CudaMatmul, OneRowShapesOnCublasLtMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  struct Case {
    int64_t n, k;
    bool aligned;
    const char* why;
  };
  const Case cases[] = {{6144, 4096, false, "x unaligned"},
                        {cuda::kOneRowMaxN + 64, 256, true, "N past the one-row kernel"},
                        {64, cuda::kOneRowMaxK + 8, true, "K past the one-row kernel"},
                        {300, 1004, true, "K % 8 != 0"}};
  uint32_t seed = 3000;
  for (const Case& c : cases) {
    for (DType in : {DType::bf16, DType::f16}) {
      for (DType out : {in, DType::f32}) {
        cuda::LinearShape shape{1, c.n, c.k, in, in, out, c.aligned};
        ASSERT_EQ(cuda::choose_linear(shape, ctx.gpu.cuda_tuning()), cuda::LinearKernel::cublaslt)
            << c.why;
        // x: columns [begin, begin + K) of a [1, K + 8] buffer.
        const int64_t begin = c.aligned ? 0 : 1;
        const Pair xbuf = random_pair(in, Shape{1, c.k + 8}, seed++);
        const Pair w = random_pair(in, Shape{c.n, c.k}, seed++, 0.05f);
        const Pair bias = random_pair(DType::f32, Shape{c.n}, seed++);
        const Pair y = zeros_pair(out, Shape{1, c.n});
        const bool with_bias = out == DType::f32;
        const Tensor no_bias;
        linear(ctx.cpu, columns(xbuf.cpu, begin, c.k), w.cpu, with_bias ? bias.cpu.view() : no_bias,
               y.cpu);
        linear(ctx.gpu, columns(xbuf.gpu, begin, c.k), w.gpu, with_bias ? bias.gpu.view() : no_bias,
               y.gpu);
        ctx.gpu.synchronize();
        expect_close(y.gpu, y.cpu, linear_tolerance(Types{in, out}),
                     std::string(c.why) + " " + name_of(in) + " -> " + name_of(out) +
                         " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                         (with_bias ? " + bias" : ""));
      }
    }
  }
}

// linear_per_head: CUDA's one launch against the CPU's per-head linear(), on strided head columns
// as MLA uses them (DeepSeek-V2-Lite's absorbed shapes: 16 heads, 128 -> 512 and 512 -> 128), and a
// token's rows equal alone and among 17 tokens.
TEST(CudaMatmul, LinearPerHeadMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 900;
  for (DType in : kFloatDTypes) {
    for (DType out : {DType::f32, in}) {
      for (const auto [n, heads, k, rows, width] : {std::array<int64_t, 5>{1, 16, 128, 512, 192},
                                                    {17, 16, 512, 128, 576},
                                                    {5, 3, 40, 33, 48}}) {
        const Pair x = random_pair(in, Shape{n, heads, width}, seed++);
        const Pair w = random_pair(in, Shape{heads, rows, k}, seed++, 0.05f);
        const Pair y = zeros_pair(out, Shape{n, heads, rows});
        linear_per_head(ctx.cpu, x.cpu->slice(2, 0, k), w.cpu, y.cpu);
        linear_per_head(ctx.gpu, x.gpu->slice(2, 0, k), w.gpu, y.gpu);
        ctx.gpu.synchronize();
        const std::string what = fmt::format("{} -> {} n={} H={} K={} N={}", name_of(in),
                                             name_of(out), n, heads, k, rows);
        expect_close(y.gpu, y.cpu, tolerance(out), what);
        if (n > 1) {
          const Pair one = zeros_pair(out, Shape{1, heads, rows});
          linear_per_head(ctx.gpu, x.gpu->slice(0, 2, 3).slice(2, 0, k), w.gpu, one.gpu);
          ctx.gpu.synchronize();
          expect_equal(one.gpu, y.gpu->slice(0, 2, 3), what + " token 2 alone");
        }
      }
    }
  }
}

}  // namespace
}  // namespace dspark::test
