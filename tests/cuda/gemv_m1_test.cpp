// The one-row CUDA-core linear kernel (backend/cuda/kernels/gemv_m1.cu; choose_linear in
// backend/cuda/policy/linear.h gives it M == 1 with 16-bit x and w, K % 8 == 0, K <= 16,384,
// N <= 65,536 and aligned operands) against the CPU on the same rounded inputs: K from one 16-byte
// chunk up to the kernel's limit, so one to four chunks per lane and warps with a partial or empty
// share of K; N below, at and above every row-tile size (4, 8, 16) and past the grid's first pass;
// both output dtypes, with and without a bias; in CTAs of 16 warps and of 8. Then its own
// properties: the same bits on every call (no atomics, a fixed summation order), and the values of
// cuBLASLt (which takes the same row when x is not 16-byte aligned) within rounding.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dspark/backend/cuda/policy/device.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

// one_row_half_ctas_max_n for a run: 0, CTAs of 16 warps everywhere ("Full"); 1 << 20, CTAs of 8
// warps for every N with K <= 8,192, the larger K keeping 16 warps ("Half").
int64_t half_ctas_max_n(bool half) {
  return half ? int64_t{1} << 20 : 0;
}

class CudaGemvM1Ctas : public ::testing::TestWithParam<bool> {};

TEST_P(CudaGemvM1Ctas, OneRowMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const ScopedTuning<int64_t> ctas(ctx.gpu, &cuda::Tuning::one_row_half_ctas_max_n,
                                   half_ctas_max_n(GetParam()));
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
}

INSTANTIATE_TEST_SUITE_P(Warps, CudaGemvM1Ctas, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Half" : "Full"; });

// Two calls of the one-row kernel give the same bits, in CTAs of either size; the same row read
// from one element into a wider buffer (not 16-byte aligned: cuBLASLt) gives the same values
// within rounding.
TEST(CudaGemvM1, DeterministicAndMatchesCublasLt) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  constexpr int64_t kK = 4096, kN = 6144;
  const OwnedTensor row = random_tensor(DType::bf16, Shape{1, kK}, 9100);
  std::vector<float> wide_values(kK + 8, 0.0f);
  const std::vector<float> row_values = to_f32_vector(row.view());
  std::copy(row_values.begin(), row_values.end(), wide_values.begin() + 1);
  const Pair x = copy_pair(row.view());
  const Pair wide = values_pair(wide_values, DType::bf16, Shape{1, kK + 8});
  const Pair w = random_pair(DType::bf16, Shape{kN, kK}, 9101, 0.05f);
  const Pair c = zeros_pair(DType::f32, Shape{1, kN});
  linear(ctx.gpu, columns(wide.gpu, 1, kK), w.gpu, Tensor{}, c.gpu);  // cuBLASLt
  for (bool half : {false, true}) {
    const ScopedTuning<int64_t> ctas(ctx.gpu, &cuda::Tuning::one_row_half_ctas_max_n,
                                     half_ctas_max_n(half));
    const Pair a = zeros_pair(DType::f32, Shape{1, kN}), b = zeros_pair(DType::f32, Shape{1, kN});
    linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, a.gpu);
    linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, b.gpu);
    ctx.gpu.synchronize();
    const std::string what = half ? "8-warp CTAs" : "16-warp CTAs";
    const OwnedTensor ha = OwnedTensor::copy_of(a.gpu.view(), Device::cpu());
    const OwnedTensor hb = OwnedTensor::copy_of(b.gpu.view(), Device::cpu());
    EXPECT_EQ(0, std::memcmp(ha.view().data(), hb.view().data(), kN * sizeof(float)))
        << what << ": two calls of the one-row kernel differ";
    expect_close(a.gpu, c.gpu, 1e-4, what + ": one-row kernel vs cuBLASLt");
  }
}

}  // namespace
}  // namespace dspark::test
