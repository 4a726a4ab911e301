// The small-M linear path (backend/cuda/kernels/gemv.cu: M <= 8, 16-bit weights, K % 8 == 0)
// against the CPU on the same rounded inputs, over every M, odd N, long K (several unrolled
// steps plus a tail), strided x rows (stride % 8 == 0), both output dtypes and biases.
// Tolerances as tests/cuda/matmul_test.cpp.
#include <cstdlib>

#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

TEST(CudaGemv, SmallMMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  // The path is opt-in and read once per process: enable it before the first linear call (ctest
  // runs every test in its own process).
  setenv("DSPARK_CUDA_GEMV", "1", 1);
  Contexts ctx;
  uint32_t seed = 7000;
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {in, DType::f32}) {
      for (int64_t m = 1; m <= 8; ++m) {
        for (int64_t n : {1, 7, 4099}) {
          for (int64_t k : {8, 1032, 4096 + 8 * 37}) {
            const int64_t ldx = k + (m % 2 ? 16 : 0);  // odd M: x rows inside a wider buffer
            const Pair xbuf = random_pair(in, Shape{m, ldx}, seed++);
            const Tensor xc = xbuf.cpu.view().slice(1, 0, k), xg = xbuf.gpu.view().slice(1, 0, k);
            const Pair w = random_pair(in, Shape{n, k}, seed++, 0.05f);
            const Pair bias = random_pair(DType::f32, Shape{n}, seed++);
            const Pair y = zeros_pair(out, Shape{m, n});
            const bool with_bias = (m + n) % 2 == 0;
            const Tensor no_bias;
            linear(ctx.cpu, xc, w.cpu, with_bias ? bias.cpu.view() : no_bias, y.cpu);
            linear(ctx.gpu, xg, w.gpu, with_bias ? bias.gpu.view() : no_bias, y.gpu);
            ctx.gpu.synchronize();
            expect_close(y.gpu, y.cpu, out == DType::f32 ? 1e-4 : tolerance(out),
                         name_of(in) + " -> " + name_of(out) + " M=" + std::to_string(m) +
                             " N=" + std::to_string(n) + " K=" + std::to_string(k));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dspark::test
