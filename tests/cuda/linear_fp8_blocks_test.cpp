// linear with FP8 block-scaled weights (WeightFormat::fp8_blocks, ops/matmul.h) on CUDA against
// the CPU: f32 output within 1e-4 relative RMS (both sum each chunk of 64 products in f32, in other
// orders, then add scale * sum in k order), bf16 output 1e-2; blocks of 128 x 128 (the published
// checkpoints'), 16 x 64 and 32 x 256, partial last row and column blocks, M from 1 to 130 (several
// launches of 64 rows), K past the x-in-registers limit (the stream kernels). A row's bits do not
// depend on M up to 64: the one-row decode and a 17-row verify give the same row (the kernels
// chosen with m_invariant; the x-in-registers kernel is never used for block scales).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cuda_consistency.h"
#include "dspark/backend/cuda/policy/linear_fp8.h"
#include "dspark/ops/matmul.h"

namespace dspark {
namespace {

struct Fp8Matrix {
  test::Pair codes, scales;
  int64_t n, k, block_n, block_k;
  WeightMatrix on(bool gpu) const {
    WeightMatrix w;
    w.format = WeightFormat::fp8_blocks;
    w.data = gpu ? codes.gpu.view() : codes.cpu.view();
    w.scales = gpu ? scales.gpu.view() : scales.cpu.view();
    w.n = n;
    w.k = k;
    w.block_n = block_n;
    w.block_k = block_k;
    return w;
  }
};

// Random E4M3 codes (no NaN codes 0x7F / 0xFF) and scales in [0.5, 2) / 448 * 0.05.
Fp8Matrix random_fp8(int64_t n, int64_t k, int64_t bn, int64_t bk, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> codes(static_cast<size_t>(n * k));
  for (uint8_t& c : codes) {
    do {
      c = static_cast<uint8_t>(rng() & 0xFF);
    } while ((c & 0x7F) == 0x7F);
  }
  const int64_t rows = (n + bn - 1) / bn, cols = (k + bk - 1) / bk;
  std::vector<float> scales(static_cast<size_t>(rows * cols));
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (float& s : scales) s = u(rng) * 0.05f / 448.0f;
  return Fp8Matrix{test::vector_pair(codes, Shape{n, k}),
                   test::values_pair(scales, DType::f32, Shape{rows, cols}),
                   n,
                   k,
                   bn,
                   bk};
}

TEST(CudaLinearFp8Blocks, MatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  struct Case {
    int64_t m, n, k, bn, bk;
  };
  for (const Case cs :
       {Case{1, 16, 64, 128, 128}, Case{5, 37, 96, 16, 64}, Case{1, 300, 4096, 128, 128},
        Case{17, 160, 160, 128, 128}, Case{16, 4224, 4096 + 64 + 16, 128, 128},
        Case{64, 40, 512, 32, 256}, Case{130, 33, 144, 16, 64}, Case{3, 1000, 14336, 128, 128}}) {
    const Fp8Matrix w = random_fp8(cs.n, cs.k, cs.bn, cs.bk, 7);
    const test::Pair bias = test::random_pair(DType::f32, Shape{cs.n}, 12);
    // x and y as column slices of wider buffers (row strides a multiple of 8 elements).
    const test::Pair xw = test::random_pair(DType::bf16, Shape{cs.m, cs.k + 16}, 13);
    const Tensor x_cpu = test::columns(xw.cpu, 8, cs.k), x_gpu = test::columns(xw.gpu, 8, cs.k);
    for (DType ydt : {DType::f32, DType::bf16}) {
      const std::string what = fmt::format("m {} n {} k {} blocks {}x{} y {}", cs.m, cs.n, cs.k,
                                           cs.bn, cs.bk, dtype_name(ydt));
      const test::Pair yw = test::zeros_pair(ydt, Shape{cs.m, cs.n + 8});
      const Tensor y_cpu = test::columns(yw.cpu, 0, cs.n), y_gpu = test::columns(yw.gpu, 0, cs.n);
      linear(c.cpu, x_cpu, w.on(false), bias.cpu, y_cpu);
      linear(c.gpu, x_gpu, w.on(true), bias.gpu, y_gpu);
      c.gpu.synchronize();
      test::expect_close(OwnedTensor::copy_of(y_gpu, Device::cpu()),
                         OwnedTensor::copy_of(y_cpu, Device::cpu()),
                         ydt == DType::f32 ? 1e-4 : 1e-2, what);
    }
  }
}

// Verify rows equal decode rows: each row of an M-row launch (1..64, every kernel the policy picks
// for block scales) has the bits of the same row computed alone.
TEST(CudaLinearFp8Blocks, RowsDoNotDependOnM) {
  DSPARK_REQUIRE_CUDA();
  test::Contexts c;
  for (const int64_t k : {int64_t{4096}, int64_t{14336}, int64_t{1040}}) {
    const int64_t n = 2 * 132 * 16 + 48;
    const Fp8Matrix w = random_fp8(n, k, 128, 128, 21);
    const test::Pair x = test::random_pair(DType::bf16, Shape{64, k}, 22);
    const test::Pair one = test::zeros_pair(DType::f32, Shape{1, n});
    std::vector<OwnedTensor> alone;
    for (int64_t i = 0; i < 64; ++i) {
      linear(c.gpu, x.gpu.view().slice(0, i, i + 1), w.on(true), Tensor{}, one.gpu);
      alone.push_back(OwnedTensor::copy_of(one.gpu.view(), Device::cpu()));
    }
    for (const int64_t m : {2, 8, 9, 16, 17, 33, 64}) {
      const test::Pair y = test::zeros_pair(DType::f32, Shape{m, n});
      linear(c.gpu, x.gpu.view().slice(0, 0, m), w.on(true), Tensor{}, y.gpu);
      c.gpu.synchronize();
      const OwnedTensor host = OwnedTensor::copy_of(y.gpu.view(), Device::cpu());
      for (int64_t i = 0; i < m; ++i)
        test::expect_equal(OwnedTensor::copy_of(host.view().slice(0, i, i + 1), Device::cpu()),
                           alone[static_cast<size_t>(i)],
                           fmt::format("k {} m {}: row {} against the row alone", k, m, i));
    }
  }
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // what the CUDA kernels refuse, the CPU takes
TEST(CudaLinearFp8Blocks, RefusesBlocksTheKernelsCannotRead) {
  DSPARK_REQUIRE_CUDA();
  Context gpu(test::kTestGpu);
  const OwnedTensor x = OwnedTensor::zeros(DType::bf16, Shape{2, 128}, test::kTestGpu);
  const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{2, 32}, test::kTestGpu);
  for (const auto& [bn, bk] : {std::pair<int64_t, int64_t>{8, 128}, {16, 96}, {16, 192}}) {
    const Fp8Matrix w = random_fp8(32, 128, bn, bk, 3);
    EXPECT_THROW(linear(gpu, x, w.on(true), Tensor{}, y), Error) << bn << "x" << bk;
  }
}
#endif

}  // namespace
}  // namespace dspark
