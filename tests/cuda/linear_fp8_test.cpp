// FP8 weights on CUDA against the CPU (ops/linear_fp8.h): the per-row quantization gives the same
// codes and scales, and the tensor-core projection the CPU reference's results (f32 output:
// relative RMS 1e-4, summation order and the MMA's accumulation; bf16 output: 1e-2), for M from 1
// to 130 (several launches of 64 rows), odd N, K with a partial last chunk, a bias, and strided x /
// y rows; a row's result does not depend on M (bitwise). Every kernel of choose_linear_fp8
// (backend/cuda/policy/linear_fp8.h), reached through M, N and K: the tile kernel and the three
// stream kernels give the same bits on the weight rows they share, the x-in-registers kernel the
// CPU's values.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_consistency.h"
#include "dspark/backend/cuda/policy/linear_fp8.h"
#include "dspark/ops/linear_fp8.h"

namespace dspark {
namespace {

struct Quantized {
  test::Pair w8, scale;
};

Quantized quantize_both(test::Contexts& c, const test::Pair& w) {
  const Shape shape = w.cpu->shape();
  Quantized q{test::zeros_pair(DType::u8, shape), test::zeros_pair(DType::f32, Shape{shape[0]})};
  quantize_rows_fp8(c.cpu, w.cpu, q.w8.cpu, q.scale.cpu);
  quantize_rows_fp8(c.gpu, w.gpu, q.w8.gpu, q.scale.gpu);
  c.gpu.synchronize();
  return q;
}

TEST(CudaLinearFp8, QuantizationMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t n = 37, k = 300;
    OwnedTensor host = test::random_tensor(dtype, Shape{n, k}, 3, 0.05f);
    // A zero row and a row of huge values.
    std::vector<float> v = to_f32_vector(host);
    for (int64_t j = 0; j < k; ++j) v[static_cast<size_t>(4 * k + j)] = 0.0f;
    for (int64_t j = 0; j < k; ++j) v[static_cast<size_t>(9 * k + j)] *= 1e6f;
    const test::Pair w = test::values_pair(v, dtype, Shape{n, k});
    const Quantized q = quantize_both(c, w);
    EXPECT_EQ(to_vector<uint8_t>(q.w8.gpu.view()), to_vector<uint8_t>(q.w8.cpu.view()))
        << dtype_name(dtype);
    test::expect_equal(q.scale.gpu, q.scale.cpu, std::string(dtype_name(dtype)) + " scales");
  }
}

TEST(CudaLinearFp8, ProjectionMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 sh : {Shape3{1, 16, 64}, Shape3{5, 37, 96}, Shape3{16, 300, 4096},
                          Shape3{17, 64, 208}, Shape3{64, 40, 512}, Shape3{130, 33, 144}}) {
    const test::Pair w = test::random_pair(DType::bf16, Shape{sh.n, sh.k}, 11, 0.05f);
    const Quantized q = quantize_both(c, w);
    const test::Pair bias = test::random_pair(DType::f32, Shape{sh.n}, 12);
    // x and y as column slices of wider buffers (row strides a multiple of 8 elements).
    const test::Pair xw = test::random_pair(DType::bf16, Shape{sh.m, sh.k + 16}, 13);
    const Tensor x_cpu = test::columns(xw.cpu, 8, sh.k), x_gpu = test::columns(xw.gpu, 8, sh.k);
    for (DType ydt : {DType::f32, DType::bf16}) {
      const std::string what =
          fmt::format("m {} n {} k {} y {}", sh.m, sh.n, sh.k, dtype_name(ydt));
      const test::Pair yw = test::zeros_pair(ydt, Shape{sh.m, sh.n + 8});
      const Tensor y_cpu = test::columns(yw.cpu, 0, sh.n), y_gpu = test::columns(yw.gpu, 0, sh.n);
      linear_fp8(c.cpu, x_cpu, q.w8.cpu, q.scale.cpu, bias.cpu, y_cpu);
      linear_fp8(c.gpu, x_gpu, q.w8.gpu, q.scale.gpu, bias.gpu, y_gpu);
      c.gpu.synchronize();
      test::expect_close(OwnedTensor::copy_of(y_gpu, Device::cpu()),
                         OwnedTensor::copy_of(y_cpu, Device::cpu()),
                         ydt == DType::f32 ? 1e-4 : 1e-2, what);
    }
    // Batch invariance: each row alone gives the bits it had in the batch.
    const test::Pair y_all = test::zeros_pair(DType::f32, Shape{sh.m, sh.n});
    linear_fp8(c.gpu, x_gpu, q.w8.gpu, q.scale.gpu, Tensor{}, y_all.gpu);
    const test::Pair y_one = test::zeros_pair(DType::f32, Shape{1, sh.n});
    for (int64_t i = 0; i < sh.m; i += std::max<int64_t>(1, sh.m / 4)) {
      linear_fp8(c.gpu, x_gpu.slice(0, i, i + 1), q.w8.gpu, q.scale.gpu, Tensor{}, y_one.gpu);
      c.gpu.synchronize();
      test::expect_equal(y_one.gpu,
                         OwnedTensor::copy_of(y_all.gpu->slice(0, i, i + 1), test::kTestGpu),
                         fmt::format("m {} n {} k {}: row {} alone", sh.m, sh.n, sh.k, i));
    }
  }
}

// The caps that size the shapes below: the GPU's (on the CPU, DSPARK_CONSISTENCY_ON_CPU, an
// H200's 132 multiprocessors, so that the shapes stay the same).
cuda::DeviceCaps sizing_caps(const Context& gpu) {
  const cuda::DeviceCaps caps = gpu.cuda_caps();
  return caps.sm_count > 0 ? caps : cuda::DeviceCaps{9, 132};
}

// The tile kernel and the stream kernels (stages of 4; stages of 2 over one or two row tiles) run
// each row's sums in the same order: the same bits. They are reached at K past the x-in-registers
// kernel's limit (whole stages, a chunk range that does not fill a stage and a partial last chunk),
// M <= 16, by N against the CTA slots (two per multiprocessor): with M 9..16 the tile kernel for
// slots x 16 < N < slots x 32, stages of 2 below, two row tiles per step above (N up to several
// blocks per CTA); with M <= 8 stages of 4 for every N. One weight matrix, its first N rows for
// each launch: the tile kernel's results at M = 16 are the reference for the rows and columns the
// others share (at M 1, 7 and 9 the first rows of the same x: a row's result does not depend on
// M).
TEST(CudaLinearFp8, StreamKernelsGiveTheBitsOfTheTileKernel) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  const cuda::DeviceCaps caps = sizing_caps(c.gpu);
  const int64_t slots = 2 * static_cast<int64_t>(caps.sm_count);
  const int64_t k = 4096 + 64 + 16;
  const int64_t n_tile = 32 * slots - 8;       // the tile kernel at M = 16, a partial last tile
  const int64_t n_most = 5 * 16 * slots + 40;  // two row tiles per step, several blocks per CTA
  const test::Pair w = test::random_pair(DType::bf16, Shape{n_most, k}, 21, 0.05f);
  const Quantized q = quantize_both(c, w);
  const test::Pair bias = test::random_pair(DType::f32, Shape{n_most}, 23);
  const test::Pair x = test::random_pair(DType::bf16, Shape{16, k}, 22);
  // The first n weight rows (and their scales and bias) on one side.
  auto rows = [](const test::Pair& p, bool gpu, int64_t n) {
    return (gpu ? p.gpu.view() : p.cpu.view()).slice(0, 0, n);
  };
  const test::Pair ref = test::zeros_pair(DType::f32, Shape{16, n_tile});
  ASSERT_EQ(cuda::choose_linear_fp8(16, n_tile, k, caps), cuda::Fp8Kernel::tile);
  linear_fp8(c.gpu, x.gpu, rows(q.w8, true, n_tile), rows(q.scale, true, n_tile),
             rows(bias, true, n_tile), ref.gpu);
  linear_fp8(c.cpu, x.cpu, rows(q.w8, false, n_tile), rows(q.scale, false, n_tile),
             rows(bias, false, n_tile), ref.cpu);
  c.gpu.synchronize();
  test::expect_close(ref.gpu, ref.cpu, 1e-4, fmt::format("m 16 n {} k {}: tile kernel", n_tile, k));
  const OwnedTensor ref_host = OwnedTensor::copy_of(ref.gpu.view(), Device::cpu());

  struct Case {
    int64_t m, n;
    cuda::Fp8Kernel kernel;
    const char* name;
  };
  const Case cases[] = {
      {16, 16, cuda::Fp8Kernel::stream2, "stages of 2"},
      {16, 40, cuda::Fp8Kernel::stream2, "stages of 2"},
      {16, 16 * slots, cuda::Fp8Kernel::stream2, "stages of 2"},
      {9, 16 * slots - 24, cuda::Fp8Kernel::stream2, "stages of 2"},
      {16, 32 * slots + 24, cuda::Fp8Kernel::stream2_tiles2, "stages of 2, two row tiles"},
      {16, n_most, cuda::Fp8Kernel::stream2_tiles2, "stages of 2, two row tiles"},
      {9, n_most, cuda::Fp8Kernel::stream2_tiles2, "stages of 2, two row tiles"},
      {1, 16, cuda::Fp8Kernel::stream4, "stages of 4"},
      {7, 40, cuda::Fp8Kernel::stream4, "stages of 4"},
      {1, 4096, cuda::Fp8Kernel::stream4, "stages of 4"},
      {7, n_tile, cuda::Fp8Kernel::stream4, "stages of 4"},
      {1, n_most, cuda::Fp8Kernel::stream4, "stages of 4"},
      {7, n_most, cuda::Fp8Kernel::stream4, "stages of 4"},
  };
  for (const Case& cs : cases) {
    const std::string what = fmt::format("m {} n {} k {}, {}", cs.m, cs.n, k, cs.name);
    ASSERT_EQ(cuda::choose_linear_fp8(cs.m, cs.n, k, caps), cs.kernel) << what;
    const test::Pair y = test::zeros_pair(DType::f32, Shape{cs.m, cs.n});
    const Tensor xg = x.gpu.view().slice(0, 0, cs.m), xc = x.cpu.view().slice(0, 0, cs.m);
    linear_fp8(c.gpu, xg, rows(q.w8, true, cs.n), rows(q.scale, true, cs.n), rows(bias, true, cs.n),
               y.gpu);
    linear_fp8(c.cpu, xc, rows(q.w8, false, cs.n), rows(q.scale, false, cs.n),
               rows(bias, false, cs.n), y.cpu);
    c.gpu.synchronize();
    test::expect_close(y.gpu, y.cpu, 1e-4, what + ": vs the CPU");
    // The rows and columns the tile kernel's reference has.
    const int64_t cols = std::min(cs.n, n_tile);
    const OwnedTensor got = OwnedTensor::copy_of(y.gpu.view(), Device::cpu());
    const OwnedTensor want =
        OwnedTensor::copy_of(ref_host.view().slice(0, 0, cs.m).slice(1, 0, cols), Device::cpu());
    test::expect_equal(OwnedTensor::copy_of(got.view().slice(1, 0, cols), Device::cpu()), want,
                       what + ": vs the tile kernel");
  }
}

// The x-in-registers kernel (M <= 16, K <= 4096) splits K differently from the tile kernel: the
// CPU's results to f32 rounding; K up to its limit (16 warps x 4 chunks of 64), with a partial
// chunk and warps that get nothing, N from one row tile to several per CTA; and K just past it
// (a stream kernel then).
TEST(CudaLinearFp8, XregKernelMatchesTheCpu) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  const cuda::DeviceCaps caps = sizing_caps(c.gpu);
  for (const int64_t k : {int64_t{4096}, int64_t{1040}, int64_t{64}, int64_t{4096 + 16}}) {
    for (const int64_t n :
         {int64_t{16}, int64_t{40}, int64_t{4096 + 24}, int64_t{3} * caps.sm_count * 16 + 8}) {
      const test::Pair w = test::random_pair(DType::bf16, Shape{n, k}, 31, 0.05f);
      const Quantized q = quantize_both(c, w);
      const test::Pair bias = test::random_pair(DType::f32, Shape{n}, 33);
      for (const int64_t m : {1, 7, 16}) {
        const std::string what = fmt::format("m {} n {} k {}", m, n, k);
        EXPECT_EQ(cuda::choose_linear_fp8(m, n, k, caps) == cuda::Fp8Kernel::registers,
                  k <= cuda::kFp8RegistersMaxK)
            << what;
        const test::Pair x = test::random_pair(DType::bf16, Shape{m, k}, 32);
        const test::Pair y = test::zeros_pair(DType::f32, Shape{m, n});
        const test::Pair yb = test::zeros_pair(DType::bf16, Shape{m, n});
        linear_fp8(c.gpu, x.gpu, q.w8.gpu, q.scale.gpu, bias.gpu, y.gpu);
        linear_fp8(c.gpu, x.gpu, q.w8.gpu, q.scale.gpu, Tensor{}, yb.gpu);
        linear_fp8(c.cpu, x.cpu, q.w8.cpu, q.scale.cpu, bias.cpu, y.cpu);
        linear_fp8(c.cpu, x.cpu, q.w8.cpu, q.scale.cpu, Tensor{}, yb.cpu);
        c.gpu.synchronize();
        test::expect_close(y.gpu, y.cpu, 1e-4, what);
        test::expect_close(yb.gpu, yb.cpu, 1e-2, what + ", bf16 out");
      }
    }
  }
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // what the CUDA kernel refuses, the CPU takes
TEST(CudaLinearFp8, RefusesWhatTheKernelCannotRead) {
  DSPARK_REQUIRE_CUDA();
  Context gpu(test::kTestGpu);
  const OwnedTensor w8 = OwnedTensor::zeros(DType::u8, Shape{16, 40}, test::kTestGpu);
  const OwnedTensor scale = OwnedTensor::zeros(DType::f32, Shape{16}, test::kTestGpu);
  const OwnedTensor x = OwnedTensor::zeros(DType::bf16, Shape{2, 40}, test::kTestGpu);
  const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{2, 16}, test::kTestGpu);
  EXPECT_THROW(linear_fp8(gpu, x, w8, scale, Tensor{}, y), Error);  // K % 16 != 0
  const OwnedTensor w8b = OwnedTensor::zeros(DType::u8, Shape{16, 48}, test::kTestGpu);
  const OwnedTensor xf = OwnedTensor::zeros(DType::f32, Shape{2, 48}, test::kTestGpu);
  EXPECT_THROW(linear_fp8(gpu, xf, w8b, scale, Tensor{}, y), Error);  // x must be bf16
}
#endif

}  // namespace
}  // namespace dspark
