// FP8 weights on CUDA against the CPU (ops/linear_fp8.h): the per-row quantization gives the same
// codes and scales, and the tensor-core projection the CPU reference's results (f32 output:
// relative RMS 1e-4, summation order and the MMA's accumulation; bf16 output: 1e-2), for M from 1
// to 130 (several launches of 64 rows), odd N, K with a partial last chunk, a bias, and strided x /
// y rows; a row's result does not depend on M (bitwise), nor on the kernel (tile or stream).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "cuda_consistency.h"
#include "dspark/backend/cuda/kernels.h"
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

// The stream kernel (set_fp8_stream(2 | 4 [, 2 row tiles]), M <= 16) gives the bits of the tile
// kernel (set_fp8_stream(0)): each row's sums run in the same order. N from one tile to more tiles
// than two CTAs per SM can take at once (several tiles per CTA); K with whole stages, a chunk range
// that does not fill a stage and a partial last chunk, and K so short that some warps get nothing.
TEST(CudaLinearFp8, StreamKernelGivesTheBitsOfTheTileKernel) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  for (const int64_t k : {int64_t{4096 + 64 + 16}, int64_t{512}}) {
    for (const int64_t n : {16, 40, 4096, 2 * 132 * 2 * 16 + 24, 5 * 132 * 2 * 16 + 40}) {
      const test::Pair w = test::random_pair(DType::bf16, Shape{n, k}, 21, 0.05f);
      const Quantized q = quantize_both(c, w);
      const test::Pair bias = test::random_pair(DType::f32, Shape{n}, 23);
      for (const int64_t m : {1, 7, 16}) {
        const test::Pair x = test::random_pair(DType::bf16, Shape{m, k}, 22);
        const test::Pair y0 = test::zeros_pair(DType::f32, Shape{m, n});
        cuda::set_fp8_stream(0);
        linear_fp8(c.gpu, x.gpu, q.w8.gpu, q.scale.gpu, bias.gpu, y0.gpu);
        linear_fp8(c.cpu, x.cpu, q.w8.cpu, q.scale.cpu, bias.cpu, y0.cpu);
        struct Variant {
          int stages, tiles;
          bool balanced;
        };
        for (const Variant v : {Variant{2, 1, true}, Variant{4, 1, true}, Variant{2, 2, true},
                                Variant{2, 2, false}}) {
          const test::Pair y = test::zeros_pair(DType::f32, Shape{m, n});
          cuda::set_fp8_stream(v.stages, v.tiles);
          cuda::set_fp8_balanced(v.balanced);
          linear_fp8(c.gpu, x.gpu, q.w8.gpu, q.scale.gpu, bias.gpu, y.gpu);
          cuda::set_fp8_stream_default();
          cuda::set_fp8_balanced(true);
          c.gpu.synchronize();
          const std::string what = fmt::format("m {} n {} k {} stages of {} x {} tiles{}", m, n, k,
                                               v.stages, v.tiles, v.balanced ? "" : ", slots");
          test::expect_equal(y.gpu, y0.gpu, what + ": stream vs tile kernel");
          test::expect_close(y.gpu, y0.cpu, 1e-4, what + ": stream kernel vs the CPU");
        }
      }
    }
  }
  cuda::set_fp8_stream_default();
  EXPECT_THROW(cuda::set_fp8_stream(3), Error);
  EXPECT_THROW(cuda::set_fp8_stream(4, 2), Error);
  EXPECT_THROW(cuda::set_fp8_stream(8, 2), Error);
}

// The x-in-registers kernel splits K differently from the tile kernel: the CPU's results to f32
// rounding; K up to its limit (16 warps x 4 chunks of 64), with a partial chunk and warps that get
// nothing, and K past it (the default kernel then).
TEST(CudaLinearFp8, XregKernelMatchesTheCpu) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  for (const int64_t k : {int64_t{4096}, int64_t{1040}, int64_t{64}, int64_t{4096 + 16}}) {
    for (const int64_t n : {16, 40, 4096 + 24, 3 * 132 * 16 + 8}) {
      const test::Pair w = test::random_pair(DType::bf16, Shape{n, k}, 31, 0.05f);
      const Quantized q = quantize_both(c, w);
      const test::Pair bias = test::random_pair(DType::f32, Shape{n}, 33);
      for (const int64_t m : {1, 7, 16}) {
        const test::Pair x = test::random_pair(DType::bf16, Shape{m, k}, 32);
        const test::Pair y = test::zeros_pair(DType::f32, Shape{m, n});
        const test::Pair yb = test::zeros_pair(DType::bf16, Shape{m, n});
        cuda::set_fp8_stream(8, 1);
        linear_fp8(c.gpu, x.gpu, q.w8.gpu, q.scale.gpu, bias.gpu, y.gpu);
        linear_fp8(c.gpu, x.gpu, q.w8.gpu, q.scale.gpu, Tensor{}, yb.gpu);
        cuda::set_fp8_stream_default();
        linear_fp8(c.cpu, x.cpu, q.w8.cpu, q.scale.cpu, bias.cpu, y.cpu);
        linear_fp8(c.cpu, x.cpu, q.w8.cpu, q.scale.cpu, Tensor{}, yb.cpu);
        c.gpu.synchronize();
        const std::string what = fmt::format("x in registers, m {} n {} k {}", m, n, k);
        test::expect_close(y.gpu, y.cpu, 1e-4, what);
        test::expect_close(yb.gpu, yb.cpu, 1e-2, what + ", bf16 out");
      }
    }
  }
}

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

}  // namespace
}  // namespace dspark
