// The small-M tensor-core linear path (backend/cuda/kernels/gemv.cu: M <= 48, 16-bit weights,
// K % 8 == 0) against the CPU on the same rounded inputs, over M on both sides of every 8-token
// tile, N below / at / above the 16-row tile, K below one 32-element chunk, with partial chunks and
// long enough for several unrolled steps per warp, strided x rows, both output dtypes and biases
// (tolerances as tests/cuda/matmul_test.cpp); and its batch invariance: a row's result is bitwise
// the same whatever the number of rows in the call (verify == decode).
#include <cstring>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"
#include "cuda/linear_paths.h"

namespace dspark::test {
namespace {

TEST(CudaGemv, SmallMMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  const ScopedLinearPaths only_small_m(false, false);  // the paths tried before it off
  cuda::set_small_m_linear(true);                      // opt-in path
#endif
  Contexts ctx;
  uint32_t seed = 7000;
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out : {in, DType::f32}) {
      for (int64_t m : {1, 2, 7, 8, 9, 16, 17, 31, 33, 48}) {
        for (int64_t n : {1, 16, 4099}) {
          for (int64_t k : {8, 24, 1032, 4096 + 8 * 37}) {
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

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // properties of the CUDA kernel itself
// Row r of an M-row call == the one-row call on row r, bit for bit, for every M the path takes.
TEST(CudaGemv, BatchInvariant) {
  DSPARK_REQUIRE_CUDA();
  const ScopedLinearPaths only_small_m(false, false);  // the paths tried before it off
  cuda::set_small_m_linear(true);
  Contexts ctx;
  constexpr int64_t kMaxM = 48, kN = 300, kK = 4096 + 8 * 5;
  for (DType out : {DType::bf16, DType::f32}) {
    const Pair x = random_pair(DType::bf16, Shape{kMaxM, kK}, 8100);
    const Pair w = random_pair(DType::bf16, Shape{kN, kK}, 8101, 0.05f);
    const Pair single = zeros_pair(out, Shape{kMaxM, kN});
    for (int64_t r = 0; r < kMaxM; ++r)
      linear(ctx.gpu, x.gpu.view().slice(0, r, r + 1), w.gpu, Tensor{},
             single.gpu.view().slice(0, r, r + 1));
    for (int64_t m : {2, 5, 8, 9, 16, 17, 25, 32, 33, 41, 48}) {
      const Pair batch = zeros_pair(out, Shape{m, kN});
      linear(ctx.gpu, x.gpu.view().slice(0, 0, m), w.gpu, Tensor{}, batch.gpu);
      ctx.gpu.synchronize();
      const OwnedTensor got = OwnedTensor::copy_of(batch.gpu.view(), Device::cpu());
      const OwnedTensor want =
          OwnedTensor::copy_of(single.gpu.view().slice(0, 0, m), Device::cpu());
      EXPECT_EQ(0, std::memcmp(got.view().data(), want.view().data(),
                               static_cast<size_t>(m * kN) * dtype_size(out)))
          << "M=" << m << " -> " << name_of(out) << ": rows differ from one-row calls";
    }
  }
}

// The switch: off routes through cuBLASLt (same values within rounding), on again is bitwise the
// kernel.
TEST(CudaGemv, SwitchFallsBackToCublas) {
  DSPARK_REQUIRE_CUDA();
  const ScopedLinearPaths only_small_m(false, false);  // the paths tried before it off
  Contexts ctx;
  const Pair x = random_pair(DType::bf16, Shape{4, 512}, 8200);
  const Pair w = random_pair(DType::bf16, Shape{96, 512}, 8201, 0.05f);
  const Pair a = zeros_pair(DType::f32, Shape{4, 96}), b = zeros_pair(DType::f32, Shape{4, 96});
  cuda::set_small_m_linear(false);
  linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, a.gpu);
  cuda::set_small_m_linear(true);
  linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, b.gpu);
  ctx.gpu.synchronize();
  expect_close(b.gpu, a.gpu, 1e-4, "small-M kernel vs cuBLASLt");
}

#endif

}  // namespace
}  // namespace dspark::test
