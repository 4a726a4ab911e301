// linear with FP8 block-scaled weights on the CPU (WeightFormat::fp8_blocks, ops/matmul.h): against
// a double-precision product of the dequantized weight (w = e4m3(code) * scale of its block), with
// partial last row and column blocks, a bias, bf16 x and y; a row's bits do not depend on M; the
// argument checks name what is wrong. CUDA against these: tests/cuda/linear_fp8_blocks_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/core/fp8.h"
#include "dspark/ops/matmul.h"

namespace dspark {
namespace {

struct Fp8Host {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  int64_t n, k, bn, bk;
  OwnedTensor codes_t, scales_t;
  WeightMatrix matrix() const {
    WeightMatrix w;
    w.format = WeightFormat::fp8_blocks;
    w.data = codes_t.view();
    w.scales = scales_t.view();
    w.n = n;
    w.k = k;
    w.block_n = bn;
    w.block_k = bk;
    return w;
  }
  float weight(int64_t i, int64_t j) const {
    const int64_t cols = (k + bk - 1) / bk;
    return e4m3_to_f32(codes[static_cast<size_t>(i * k + j)]) *
           scales[static_cast<size_t>((i / bn) * cols + j / bk)];
  }
};

Fp8Host random_fp8(int64_t n, int64_t k, int64_t bn, int64_t bk, uint32_t seed) {
  std::mt19937 rng(seed);
  Fp8Host h{{}, {}, n, k, bn, bk, {}, {}};
  h.codes.resize(static_cast<size_t>(n * k));
  for (uint8_t& c : h.codes) {
    do {
      c = static_cast<uint8_t>(rng() & 0xFF);
    } while ((c & 0x7F) == 0x7F);
  }
  const int64_t rows = (n + bn - 1) / bn, cols = (k + bk - 1) / bk;
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  h.scales.resize(static_cast<size_t>(rows * cols));
  for (float& s : h.scales) s = u(rng) / 448.0f;
  h.codes_t = OwnedTensor::from_vector(h.codes, Shape{n, k}, Device::cpu());
  h.scales_t = OwnedTensor::from_vector(h.scales, Shape{rows, cols}, Device::cpu());
  return h;
}

TEST(OpsLinearFp8Blocks, MatchesTheDequantizedProduct) {
  Context ctx(Device::cpu());
  struct Case {
    int64_t m, n, k, bn, bk;
  };
  for (const Case cs : {Case{1, 16, 64, 128, 128}, Case{3, 37, 160, 16, 64},
                        Case{9, 160, 300, 128, 128}, Case{2, 40, 512, 32, 256}}) {
    const Fp8Host w = random_fp8(cs.n, cs.k, cs.bn, cs.bk, 5);
    const std::vector<float> xv = test::random_normal(static_cast<size_t>(cs.m * cs.k), 6);
    const std::vector<float> bv = test::random_normal(static_cast<size_t>(cs.n), 7);
    std::vector<float> want(static_cast<size_t>(cs.m * cs.n));
    for (int64_t r = 0; r < cs.m; ++r)
      for (int64_t i = 0; i < cs.n; ++i) {
        double acc = bv[static_cast<size_t>(i)];
        for (int64_t j = 0; j < cs.k; ++j)
          acc += static_cast<double>(w.weight(i, j)) * xv[static_cast<size_t>(r * cs.k + j)];
        want[static_cast<size_t>(r * cs.n + i)] = static_cast<float>(acc);
      }
    const OwnedTensor x = test::make_tensor(xv, DType::f32, Shape{cs.m, cs.k}, Device::cpu());
    const OwnedTensor b = test::make_tensor(bv, DType::f32, Shape{cs.n}, Device::cpu());
    const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{cs.m, cs.n}, Device::cpu());
    linear(ctx, x, w.matrix(), b, y);
    EXPECT_LT(test::relative_rms_error(to_f32_vector(y), want), 1e-6)
        << cs.m << "x" << cs.n << "x" << cs.k;
    // bf16 in and out: the same within bf16 rounding.
    const OwnedTensor xb = test::make_tensor(xv, DType::bf16, Shape{cs.m, cs.k}, Device::cpu());
    const OwnedTensor yb = OwnedTensor::zeros(DType::bf16, Shape{cs.m, cs.n}, Device::cpu());
    linear(ctx, xb, w.matrix(), b, yb);
    EXPECT_LT(test::relative_rms_error(to_f32_vector(yb), want), 1e-2);
    // Each row alone gives the bits it has in the batch.
    for (int64_t r = 0; r < cs.m; ++r) {
      const OwnedTensor one = OwnedTensor::zeros(DType::f32, Shape{1, cs.n}, Device::cpu());
      linear(ctx, x.view().slice(0, r, r + 1), w.matrix(), b, one);
      const std::vector<float> all = to_f32_vector(y);
      EXPECT_EQ(to_f32_vector(one),
                std::vector<float>(all.begin() + r * cs.n, all.begin() + (r + 1) * cs.n))
          << "row " << r;
    }
  }
}

TEST(OpsLinearFp8Blocks, EveryCodeDecodesExactly) {
  // Row i of the weight holds the codes 16 i .. 16 i + 15 (all 256 over 16 rows) at columns
  // 0..15, repeated over k = 64; one-hot rows of x read them back times the scale: y = 2^8 s
  // (e4m3(c) 2^-8) exactly, as the kernel decodes them. Rows 7 and 15 hold the NaN codes 0x7F and
  // 0xFF, so every product with them is NaN (NaN times 0).
  Context ctx(Device::cpu());
  Fp8Host w{{}, {1.0f / 64}, 16, 64, 16, 64, {}, {}};
  w.codes.resize(16 * 64);
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 64; ++j)
      w.codes[static_cast<size_t>(i * 64 + j)] = static_cast<uint8_t>(16 * i + j % 16);
  w.codes_t = OwnedTensor::from_vector(w.codes, Shape{16, 64}, Device::cpu());
  w.scales_t = OwnedTensor::from_vector(w.scales, Shape{1, 1}, Device::cpu());
  std::vector<float> xv(16 * 64, 0.0f);
  for (int64_t r = 0; r < 16; ++r) xv[static_cast<size_t>(r * 64 + r)] = 1.0f;
  const OwnedTensor x = test::make_tensor(xv, DType::f32, Shape{16, 64}, Device::cpu());
  const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{16, 16}, Device::cpu());
  linear(ctx, x, w.matrix(), Tensor{}, y);
  const std::vector<float> got = to_f32_vector(y);
  for (int r = 0; r < 16; ++r) {
    for (int i = 0; i < 16; ++i) {
      const auto code = static_cast<uint8_t>(16 * i + r);
      const float want = e4m3_to_f32(code) / 64.0f, value = got[static_cast<size_t>(r * 16 + i)];
      if (i == 7 || i == 15) {
        EXPECT_TRUE(std::isnan(value)) << "code " << int{code};
      } else {
        EXPECT_EQ(value, want) << "code " << int{code};
      }
    }
  }
}

TEST(OpsLinearFp8Blocks, ChecksTheScales) {
  Context ctx(Device::cpu());
  Fp8Host w = random_fp8(32, 128, 16, 64, 1);
  const OwnedTensor x = OwnedTensor::zeros(DType::f32, Shape{1, 128}, Device::cpu());
  const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{1, 32}, Device::cpu());
  WeightMatrix bad = w.matrix();
  bad.block_k = 32;  // the scales are [2, 2], blocks of 16 x 32 would need [2, 4]
  EXPECT_THROW(linear(ctx, x, bad, Tensor{}, y), Error);
  bad = w.matrix();
  bad.block_n = 0;
  EXPECT_THROW(linear(ctx, x, bad, Tensor{}, y), Error);
}

}  // namespace
}  // namespace dspark
