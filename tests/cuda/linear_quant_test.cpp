// linear and gather_rows with block-quantized weights on CUDA (backend/cuda/kernels/
// linear_quant.cu, linear_quant_gemv.cu, quant_rows.cu; the kernel choice: choose_linear_blocks in
// backend/cuda/policy/linear_quant.h) against a host reference computed here: core's
// dequantize_blocks to f32, then the product in double. Weights are random bytes packed into
// blocks with sane f16 scales (random_quant_blocks). Every QuantType, x bf16 / f16 / f32, y f32 and
// x's dtype, with and without a bias (f32 or bf16), over shapes that reach every path of the policy
// on the test's GPU: the few-row kernel at 1-4 rows with 1, 2, 4 and 16 warps per weight row (x
// rounded to int8 as on the CPU: 2e-2 against the reference, and the CPU's own kernels' output
// within 1e-5 when y is f32, within y's rounding otherwise); the tensor-core kernel at 5-48 rows
// in tiles of 8 (1, 2, 3, 4, 6 tiles), with one slice of K and with K split over CTAs, with 1, 2, 4
// and 8 warps on a slice, one or more rounds of row tiles, a short last slice and row group, odd N;
// the dequantizing path past 48 rows, for f32 x and for K not a multiple of 256. Tolerances
// (relative RMS) are linear's (docs/cuda-kernels.md): f32 1e-5; bf16 / f16 in, f32 out 1e-4; bf16
// out 1e-2; f16 out 2e-3; the tensor-core kernel and the dequantizing path (16-bit x) round the
// weight to x's dtype first: at least 4e-3 (bf16) / 6e-4 (f16). Then: the same bits on every call,
// rows inside wider buffers, and gather_rows_blocks equal to dequantize_blocks (f32) or its
// rounding (bf16 / f16). Last, linear_pair equals two linears bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/policy/linear_quant.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/quant.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

// A quantized weight on the GPU and its reference values on the host.
struct QuantWeight {
  QuantType quant;
  int64_t n, k;
  std::vector<float> values;  // [n][k], dequantize_blocks
  OwnedTensor blocks;         // u8 [n][row bytes] on the GPU
  OwnedTensor host_blocks;    // the same on the CPU

  WeightMatrix matrix(bool host = false) const {
    WeightMatrix w;
    w.format = WeightFormat::blocks;
    w.quant = quant;
    w.data = host ? host_blocks.view() : blocks.view();
    w.n = n;
    w.k = k;
    return w;
  }
};

QuantWeight make_weight(QuantType q, int64_t n, int64_t k, uint32_t seed) {
  const std::vector<uint8_t> bytes = random_quant_blocks(q, n, k, seed);
  const int64_t row_bytes = quant_row_bytes(q, k);
  QuantWeight w{
      q, n, k, std::vector<float>(static_cast<size_t>(n * k)), OwnedTensor{}, OwnedTensor{}};
  for (int64_t r = 0; r < n; ++r)
    dequantize_blocks(q, bytes.data() + r * row_bytes, k / quant_block(q).elements,
                      w.values.data() + r * k);
  w.blocks = OwnedTensor::from_vector(bytes, Shape{n, row_bytes}, kTestGpu);
  w.host_blocks = OwnedTensor::from_vector(bytes, Shape{n, row_bytes}, Device::cpu());
  return w;
}

// y[m][n] = x[m] . w[n] (+ bias[n]) in double: x as stored (its rounded values).
std::vector<float> reference(const std::vector<float>& x, int64_t m, const QuantWeight& w,
                             const std::vector<float>& bias) {
  std::vector<float> y(static_cast<size_t>(m * w.n));
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x.data() + i * w.k;
    for (int64_t j = 0; j < w.n; ++j) {
      const float* wr = w.values.data() + j * w.k;
      double s = bias.empty() ? 0.0 : bias[static_cast<size_t>(j)];
      for (int64_t c = 0; c < w.k; ++c) s += static_cast<double>(xr[c]) * wr[c];
      y[static_cast<size_t>(i * w.n + j)] = static_cast<float>(s);
    }
  }
  return y;
}

double expect_rel_rms(const std::vector<float>& got, const std::vector<float>& want, double tol,
                      const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  bool finite = true;
  for (float v : got) finite = finite && std::isfinite(v);
  EXPECT_TRUE(finite) << what << ": a non-finite output";
  const double err = relative_rms_error(got, want);
  EXPECT_LE(err, tol) << what << ": relative RMS error " << err << " (max abs "
                      << max_abs_error(got, want) << ")";
  return err;
}

// linear's tolerance (docs/cuda-kernels.md) for a call; on the tensor-core and dequantizing paths
// with 16-bit x the weight is rounded to x's dtype before the product.
double linear_tolerance(DType x, DType y, bool weight_rounded) {
#if defined(DSPARK_CONSISTENCY_ON_CPU)
  // The CPU's kernels may round x to 8 bits per block of 32 (ops/matmul.h: ~1e-2).
  return 3e-2;
#endif
  double tol = y == DType::f32 ? (x == DType::f32 ? 1e-5 : 1e-4) : tolerance(y);
  if (weight_rounded) tol = std::max(tol, x == DType::bf16 ? 4e-3 : 6e-4);
  return tol;
}

// The plans the calls of a test reached (on the test's GPU).
struct Coverage {
  std::set<int> row_tiles;  // the kernel's tiles of 8 rows of x: 1, 2, 3, 4 or 6
  bool one_slice = false, split = false, rounds = false, short_slice = false, dequantize = false;
  std::set<int> warps_k, gemv_warps_k;
  void add(const cuda::LinearBlocksShape& s, const cuda::LinearBlocksChoice& c) {
    if (c.kernel == cuda::LinearBlocksKernel::dequantize) {
      dequantize = true;
      return;
    }
    if (c.kernel == cuda::LinearBlocksKernel::gemv) {
      gemv_warps_k.insert(c.gemv_plan.warps_k);
      return;
    }
    const cuda::QuantMmaPlan& p = c.plan;
    row_tiles.insert(s.m <= 32 ? static_cast<int>((s.m + 7) / 8) : 6);
    (p.slices == 1 ? one_slice : split) = true;
    rounds = rounds || p.tiles_per_cta > p.warps_r;
    short_slice = short_slice || (s.k / 256) % p.slice_sbs != 0;
    warps_k.insert(p.warps_k);
  }
};

// (N, K) per rows of x: on an H200 they reach every path of the plan (Llama-3.1-8B's o and q/k/v
// projections at decode, a verify's q/k/v projection: several rounds of row tiles per CTA for
// every format, a deep K with few rows: a K split with a short last slice, small odd N). The legacy
// formats also get K = 96 (3 blocks: the dequantizing path at every M).
std::vector<std::pair<int64_t, int64_t>> shapes_for(QuantType q, int64_t m) {
  std::vector<std::pair<int64_t, int64_t>> s;
  switch (m) {
    case 1:
      s = {{37, 768}, {300, 4096}, {528, 4096}, {4096, 4096}, {64, 14592}};
      break;
    case 5:
      s = {{37, 768}, {300, 4096}, {4096, 4096}, {6144, 4096}, {64, 14592}};
      break;
    case 9:
    case 32:
    case 33:
      s = {{300, 4096}, {1000, 1280}};
      break;
    case 17:
      s = {{37, 768}, {6144, 4096}, {64, 14592}};
      break;
    case 49:
      s = {{37, 768}, {200, 1280}};
      break;
    case 300:
      s = {{37, 768}};
      break;
    default:
      s = {{37, 768}, {1000, 1280}};
      break;
  }
  if (quant_block(q).elements == 32) s.emplace_back(77, 96);
  return s;
}

class CudaLinearQuant : public ::testing::TestWithParam<QuantType> {};

std::string quant_name(const ::testing::TestParamInfo<QuantType>& info) {
  return std::string(quant_type_name(info.param));
}

TEST_P(CudaLinearQuant, MatchesHostReference) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const QuantType q = GetParam();
  Coverage cov;
  uint32_t seed = 5000 + 100 * static_cast<uint32_t>(q);
  std::map<std::pair<int64_t, int64_t>, QuantWeight> weights;
  int call = 0;
  for (DType xd : {DType::bf16, DType::f16, DType::f32}) {
    const std::vector<DType> outs =
        xd == DType::f32 ? std::vector<DType>{DType::f32} : std::vector<DType>{DType::f32, xd};
    for (DType yd : outs) {
      for (int64_t m : {1, 2, 3, 4, 5, 9, 17, 32, 33, 48, 49, 300}) {
        for (const auto& [n, k] : shapes_for(q, m)) {
          ++call;
          auto it = weights.find({n, k});
          if (it == weights.end())
            it = weights.emplace(std::make_pair(n, k), make_weight(q, n, k, seed++)).first;
          const QuantWeight& w = it->second;
          const OwnedTensor xh = random_tensor(xd, Shape{m, k}, seed++);
          const std::vector<float> xv = to_f32_vector(xh.view());
          const bool with_bias = call % 3 != 0;
          const DType bias_dtype = call % 2 == 0 ? DType::f32 : DType::bf16;
          const OwnedTensor bh = random_tensor(bias_dtype, Shape{n}, seed++);
          const std::vector<float> bv = with_bias ? to_f32_vector(bh.view()) : std::vector<float>{};
          const OwnedTensor x = OwnedTensor::copy_of(xh.view(), kTestGpu);
          const OwnedTensor b = OwnedTensor::copy_of(bh.view(), kTestGpu);
          const OwnedTensor y = OwnedTensor::zeros(yd, Shape{m, n}, kTestGpu);
          linear(ctx.gpu, x, w.matrix(), with_bias ? b.view() : Tensor{}, y);
          ctx.gpu.synchronize();

          const cuda::LinearBlocksShape s{m, n, k, q, xd, yd, true};
          const cuda::LinearBlocksChoice c =
              cuda::choose_linear_blocks(s, ctx.gpu.cuda_caps(), ctx.gpu.cuda_tuning());
          cov.add(s, c);
          // The tensor-core kernel and the dequantizing path round w to x's 16-bit dtype.
          const bool rounded = c.kernel != cuda::LinearBlocksKernel::gemv && xd != DType::f32;
          const bool gemv = c.kernel == cuda::LinearBlocksKernel::gemv;
          const std::string what =
              std::string(quant_type_name(q)) + " " + name_of(xd) + " -> " + name_of(yd) +
              " M=" + std::to_string(m) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
              (with_bias ? " +bias" : "") +
              (gemv ? " (gemv, " + std::to_string(c.gemv_plan.warps_k) + " warps per row)"
               : c.kernel == cuda::LinearBlocksKernel::mma
                   ? " (mma, " + std::to_string(c.plan.slices) + " slices)"
                   : " (dequantize)");
          // The few-row kernel rounds x to int8 per block of 32, as the CPU's kernels do
          // (ops/matmul.h: ~1e-2; up to 1.2e-2 on these random weights, whose K-quant mins cancel
          // much of each product); the comparison with the CPU below is the tight one.
          const double tol = gemv ? std::max(2e-2, linear_tolerance(xd, yd, false))
                                  : linear_tolerance(xd, yd, rounded);
          expect_rel_rms(read(y), reference(xv, m, w, bv), tol, what);
          if (gemv) {
            // The CPU's integer kernels round x the same way: only the order of f32 sums differs.
            const OwnedTensor yc = OwnedTensor::zeros(yd, Shape{m, n}, Device::cpu());
            linear(ctx.cpu, xh, w.matrix(true), with_bias ? bh.view() : Tensor{}, yc);
            expect_rel_rms(read(y), read(yc), yd == DType::f32 ? 1e-5 : tolerance(yd),
                           what + " against the CPU");
          }
        }
      }
    }
  }
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  // The paths of the policy these calls reached (the plans depend on the SM count: an H200's 132
  // reach them all).
  // Q8_A (the largest super-blocks with a min in the scale table) leaves no room for more than 32
  // rows of x: its 33 and 48 rows take the dequantizing path.
  EXPECT_EQ(cov.row_tiles,
            q == QuantType::q8_a ? (std::set<int>{1, 2, 3, 4}) : (std::set<int>{1, 2, 3, 4, 6}));
  EXPECT_FALSE(cov.gemv_warps_k.empty());
  EXPECT_TRUE(cov.one_slice && cov.split && cov.dequantize);
  if (ctx.gpu.cuda_caps().sm_count == 132) {
    EXPECT_TRUE(cov.rounds);
    EXPECT_TRUE(cov.short_slice);
    EXPECT_EQ(cov.warps_k, (std::set<int>{1, 2, 4, 8}));
    EXPECT_EQ(cov.gemv_warps_k, (std::set<int>{1, 2, 4, 16}));  // 4096, 37 / 1280, 528, 300 rows
  }
#endif
}

// Two calls give the same bits: one slice of K (a decode step's o projection) and K split over
// CTAs (a verify's o projection, a deep K with few rows, 48 rows).
TEST_P(CudaLinearQuant, SameBitsEveryCall) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const QuantType q = GetParam();
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 4096, 4096},
                                {17, 4096, 4096},
                                {1, 64, 14592},
                                {48, 1000, 1280}}) {
    const QuantWeight w = make_weight(q, n, k, 7000 + static_cast<uint32_t>(m));
    const Pair x = random_pair(DType::bf16, Shape{m, k}, 7100);
    const Pair a = zeros_pair(DType::f32, Shape{m, n}), b = zeros_pair(DType::f32, Shape{m, n});
    linear(ctx.gpu, x.gpu, w.matrix(), Tensor{}, a.gpu);
    linear(ctx.gpu, x.gpu, w.matrix(), Tensor{}, b.gpu);
    ctx.gpu.synchronize();
    const OwnedTensor ha = OwnedTensor::copy_of(a.gpu.view(), Device::cpu());
    const OwnedTensor hb = OwnedTensor::copy_of(b.gpu.view(), Device::cpu());
    EXPECT_EQ(0, std::memcmp(ha.view().data(), hb.view().data(),
                             static_cast<size_t>(m * n) * sizeof(float)))
        << quant_type_name(q) << " M=" << m << " N=" << n << " K=" << k;
  }
}

// x and y rows inside wider buffers: one row takes the few-row kernel; 17 rows with a row stride a
// multiple of 8 elements keep the tensor-core kernel, an odd one takes the dequantizing path; all
// match the reference.
TEST_P(CudaLinearQuant, RowsInsideWiderBuffers) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const QuantType q = GetParam();
  constexpr int64_t kN = 100, kK = 1280;
  const QuantWeight w = make_weight(q, kN, kK, 7300);
  for (int64_t pad : {8, 1}) {
    for (int64_t m : {1, 17}) {
      const OwnedTensor wide_h = random_tensor(DType::bf16, Shape{m, kK + pad}, 7301);
      const OwnedTensor wide = OwnedTensor::copy_of(wide_h.view(), kTestGpu);
      const Tensor x = columns(wide.view(), 0, kK);
      const OwnedTensor y_wide = OwnedTensor::zeros(DType::f32, Shape{m, kN + 3}, kTestGpu);
      const Tensor y = columns(y_wide.view(), 0, kN);
      linear(ctx.gpu, x, w.matrix(), Tensor{}, y);
      ctx.gpu.synchronize();
      const std::vector<float> all = to_f32_vector(wide_h.view());
      std::vector<float> xv;
      for (int64_t i = 0; i < m; ++i)
        xv.insert(xv.end(), all.begin() + i * (kK + pad), all.begin() + i * (kK + pad) + kK);
      const std::vector<float> got_all = read(y_wide.view());
      std::vector<float> got;
      for (int64_t i = 0; i < m; ++i)
        got.insert(got.end(), got_all.begin() + i * (kN + 3), got_all.begin() + i * (kN + 3) + kN);
      const bool rounded = m > 1;  // the tensor-core and dequantizing paths round w to bf16
      // One row: the few-row kernel, x rounded to int8 (MatchesHostReference).
      expect_rel_rms(got, reference(xv, m, w, {}),
                     m == 1 ? 2e-2 : linear_tolerance(DType::bf16, DType::f32, rounded),
                     std::string(quant_type_name(q)) + " M=" + std::to_string(m) +
                         " row stride K+" + std::to_string(pad));
    }
  }
}

// The few-row kernel's rows do not depend on how many rows the call has: row i of a call with m
// rows has the bits of the same x row alone (decode and draft steps agree with each other).
TEST_P(CudaLinearQuant, GemvRowsIndependentOfM) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const QuantType q = GetParam();
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {300, 4096}, {64, 14592}}) {
    const QuantWeight w = make_weight(q, n, k, 7400);
    const int64_t rows = cuda::kQuantGemvMaxRows;
    const OwnedTensor xh = random_tensor(DType::bf16, Shape{rows, k}, 7401);
    const OwnedTensor x = OwnedTensor::copy_of(xh.view(), kTestGpu);
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < rows; ++i) {
      const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{1, n}, kTestGpu);
      linear(ctx.gpu, x.view().slice(0, i, i + 1), w.matrix(), Tensor{}, y);
      ctx.gpu.synchronize();
      alone.push_back(read(y));
    }
    for (int64_t m = 2; m <= rows; ++m) {
      const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{m, n}, kTestGpu);
      linear(ctx.gpu, x.view().slice(0, 0, m), w.matrix(), Tensor{}, y);
      ctx.gpu.synchronize();
      const std::vector<float> got = read(y);
      for (int64_t i = 0; i < m; ++i) {
        EXPECT_EQ(0, std::memcmp(got.data() + i * n, alone[static_cast<size_t>(i)].data(),
                                 static_cast<size_t>(n) * sizeof(float)))
            << quant_type_name(q) << " N=" << n << " K=" << k << ": row " << i << " of " << m;
      }
    }
  }
}

// Batch-invariant numerics (`--exact`): the few-row kernel at every M, in chunks of
// kQuantGemvMaxRows rows. Row i of a call of m rows (a verify, many requests' rows, a prefill) has
// the bits of the same x row alone, and the rows match the CPU's integer kernels.
TEST_P(CudaLinearQuant, RowsIndependentOfMWhenBatchInvariant) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  ctx.gpu.cuda_tuning().batch_invariant = true;
  const QuantType q = GetParam();
  constexpr int64_t kRows = 37;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {300, 1280}}) {
    const QuantWeight w = make_weight(q, n, k, 7500);
    const OwnedTensor xh = random_tensor(DType::bf16, Shape{kRows, k}, 7501);
    const OwnedTensor x = OwnedTensor::copy_of(xh.view(), kTestGpu);
    const OwnedTensor bh = random_tensor(DType::f32, Shape{n}, 7502);
    const OwnedTensor b = OwnedTensor::copy_of(bh.view(), kTestGpu);
    const cuda::LinearBlocksShape s{kRows, n, k, q, DType::bf16, DType::f32, true};
    ASSERT_EQ(cuda::choose_linear_blocks(s, ctx.gpu.cuda_caps(), ctx.gpu.cuda_tuning()).kernel,
              cuda::LinearBlocksKernel::gemv)
        << quant_type_name(q);
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < kRows; ++i) {
      const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{1, n}, kTestGpu);
      linear(ctx.gpu, x.view().slice(0, i, i + 1), w.matrix(), b.view(), y);
      ctx.gpu.synchronize();
      alone.push_back(read(y));
    }
    for (int64_t m : {int64_t{5}, int64_t{8}, int64_t{17}, int64_t{33}, kRows}) {
      const std::string what = std::string(quant_type_name(q)) + " N=" + std::to_string(n) +
                               " K=" + std::to_string(k) + " M=" + std::to_string(m);
      const OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{m, n}, kTestGpu);
      linear(ctx.gpu, x.view().slice(0, 0, m), w.matrix(), b.view(), y);
      ctx.gpu.synchronize();
      const std::vector<float> got = read(y);
      for (int64_t i = 0; i < m; ++i) {
        EXPECT_EQ(0, std::memcmp(got.data() + i * n, alone[static_cast<size_t>(i)].data(),
                                 static_cast<size_t>(n) * sizeof(float)))
            << what << ": row " << i;
      }
      const OwnedTensor yc = OwnedTensor::zeros(DType::f32, Shape{m, n}, Device::cpu());
      linear(ctx.cpu, xh.view().slice(0, 0, m), w.matrix(true), bh.view(), yc);
      expect_rel_rms(got, read(yc), 1e-5, what + " against the CPU");
    }
  }
}

// linear_swiglu (an MLP's gate/up product then SwiGLU): the bits of linear into a scratch tensor
// of out's dtype then the swiglu op, at 1-4 rows (the few-row kernel, one launch: the scratch is
// left unwritten there) and, with batch-invariant numerics, at 17 rows in chunks of 4; outputs
// counts that leave the last tile short (37, 2,047) and plans of 1, 2, 4 and 8 warps per row (on
// an H100 or H200).
TEST_P(CudaLinearQuant, SwigluEqualsProductThenOp) {
  DSPARK_REQUIRE_CUDA();
  const QuantType q = GetParam();
  for (bool invariant : {false, true}) {
    Contexts ctx;
    ctx.gpu.cuda_tuning().batch_invariant = invariant;
    for (const auto& [inter, k] : {std::pair<int64_t, int64_t>{37, 768},
                                   {150, 2048},
                                   {101, 2048},
                                   {1000, 1280},
                                   {2047, 4096}}) {
      const QuantWeight w = make_weight(q, 2 * inter, k, 7600 + static_cast<uint32_t>(inter));
      for (int64_t m : invariant ? std::vector<int64_t>{1, 17} : std::vector<int64_t>{1, 2, 3, 4}) {
        for (DType yd : {DType::bf16, DType::f32}) {
          const std::string what = std::string(quant_type_name(q)) + " I=" + std::to_string(inter) +
                                   " K=" + std::to_string(k) + " M=" + std::to_string(m) + " -> " +
                                   name_of(yd) + (invariant ? " (batch-invariant)" : "");
          const OwnedTensor xh = random_tensor(DType::bf16, Shape{m, k}, 7601);
          const OwnedTensor x = OwnedTensor::copy_of(xh.view(), kTestGpu);
          const OwnedTensor scratch = OwnedTensor::zeros(yd, Shape{m, 2 * inter}, kTestGpu);
          const OwnedTensor out = OwnedTensor::zeros(yd, Shape{m, inter}, kTestGpu);
          linear_swiglu(ctx.gpu, x, w.matrix(), scratch, out);
          const OwnedTensor gu = OwnedTensor::zeros(yd, Shape{m, 2 * inter}, kTestGpu);
          const OwnedTensor want = OwnedTensor::zeros(yd, Shape{m, inter}, kTestGpu);
          linear(ctx.gpu, x, w.matrix(), Tensor{}, gu);
          swiglu(ctx.gpu, gu.view().slice(1, 0, inter), gu.view().slice(1, inter, 2 * inter), want);
          ctx.gpu.synchronize();
          expect_equal(out, want, what);
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
          const cuda::LinearBlocksShape s{m, 2 * inter, k, q, DType::bf16, yd, true};
          const cuda::LinearBlocksChoice c =
              cuda::choose_linear_blocks(s, ctx.gpu.cuda_caps(), ctx.gpu.cuda_tuning());
          if (c.kernel == cuda::LinearBlocksKernel::gemv && c.gemv_plan.warps_k < 16) {
            const std::vector<float> left = read(scratch);
            EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](float v) { return v == 0.0f; }))
                << what << ": the scratch was written (" << c.gemv_plan.warps_k
                << " warps per row): not the fused kernel";
          }
#endif
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaLinearQuant, ::testing::ValuesIn(kQuantTypes), quant_name);

// linear_pair (two products of one x, in one launch for the type pairs the few-row kernel is built
// for, as two linears otherwise) against two linear calls: the same bits, each part into its
// columns of one y, at 1-5 rows (5: two launches), with and without batch-invariant numerics, x
// bf16 / f32, y f32 / x's dtype, with and without a bias; the pairs of llama.cpp's K-quant mixes
// in both orders (Llama-3.1-8B's q/k and v shapes among them) and one pair it is not built for;
// the one launch is checked to be taken where it is built.
TEST(CudaLinearQuantPair, EqualsTwoLinears) {
  DSPARK_REQUIRE_CUDA();
  using enum QuantType;
  struct Case {
    QuantType a, b;
    int64_t na, nb, k;
    bool built;  // a pair the one-launch kernel is built for
  };
  const Case cases[] = {{q4_k, q6_k, 5120, 1024, 4096, true}, {q6_k, q4_k, 96, 32, 256, true},
                        {q5_k, q6_k, 640, 128, 2048, true},   {q4_k, q5_k, 37, 13, 768, true},
                        {q5_k, q4_k, 512, 512, 1024, true},   {q4_0, q8_0, 64, 48, 512, false}};
  for (bool invariant : {false, true}) {
    Contexts ctx;
    ctx.gpu.cuda_tuning().batch_invariant = invariant;
    for (const Case& c : cases) {
      const QuantWeight wa = make_weight(c.a, c.na, c.k, 7700 + static_cast<uint32_t>(c.na));
      const QuantWeight wb = make_weight(c.b, c.nb, c.k, 7701 + static_cast<uint32_t>(c.nb));
      const OwnedTensor bias_h = random_tensor(DType::f32, Shape{c.na + c.nb}, 7702);
      const OwnedTensor bias = OwnedTensor::copy_of(bias_h.view(), kTestGpu);
      for (int64_t m : {1, 2, 3, 4, 5}) {
        for (DType xd : {DType::bf16, DType::f32}) {
          for (DType yd : {DType::f32, xd}) {
            for (bool with_bias : {false, true}) {
              const std::string what =
                  std::string(quant_type_name(c.a)) + "/" + std::string(quant_type_name(c.b)) +
                  " N=" + std::to_string(c.na) + "+" + std::to_string(c.nb) +
                  " K=" + std::to_string(c.k) + " M=" + std::to_string(m) + " " + name_of(xd) +
                  " -> " + name_of(yd) + (with_bias ? " +bias" : "") +
                  (invariant ? " (batch-invariant)" : "");
              const OwnedTensor xh = random_tensor(xd, Shape{m, c.k}, 7703);
              const OwnedTensor x = OwnedTensor::copy_of(xh.view(), kTestGpu);
              const int64_t n = c.na + c.nb;
              const auto bias_of = [&](int64_t b0, int64_t b1) {
                return with_bias ? bias.view().slice(0, b0, b1) : Tensor{};
              };
              const OwnedTensor got = OwnedTensor::zeros(yd, Shape{m, n}, kTestGpu);
              linear_pair(ctx.gpu, x, wa.matrix(), bias_of(0, c.na), got.view().slice(1, 0, c.na),
                          wb.matrix(), bias_of(c.na, n), got.view().slice(1, c.na, n));
              const OwnedTensor want = OwnedTensor::zeros(yd, Shape{m, n}, kTestGpu);
              linear(ctx.gpu, x, wa.matrix(), bias_of(0, c.na), want.view().slice(1, 0, c.na));
              linear(ctx.gpu, x, wb.matrix(), bias_of(c.na, n), want.view().slice(1, c.na, n));
              ctx.gpu.synchronize();
              expect_equal(got, want, what);
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
              // The one launch itself: taken for the built pairs at 1-4 rows, the same bits.
              const OwnedTensor one = OwnedTensor::zeros(yd, Shape{m, n}, kTestGpu);
              const bool launched = cuda::linear_blocks_pair(
                  ctx.gpu, x, wa.matrix(), bias_of(0, c.na), one.view().slice(1, 0, c.na),
                  wb.matrix(), bias_of(c.na, n), one.view().slice(1, c.na, n));
              EXPECT_EQ(launched, c.built && m <= cuda::kQuantGemvMaxRows) << what;
              if (launched) {
                ctx.gpu.synchronize();
                expect_equal(one, want, what);
              }
#endif
            }
          }
        }
      }
    }
  }
}

class CudaGatherQuant : public ::testing::TestWithParam<QuantType> {};

// gather_rows of a quantized table: f32 rows equal dequantize_blocks bit for bit, bf16 / f16 rows
// its rounding; ids outside the table give zero rows.
TEST_P(CudaGatherQuant, MatchesDequantize) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const QuantType q = GetParam();
  constexpr int64_t kV = 50;
  for (int64_t k : {int64_t{256}, int64_t{2304}, int64_t{4352}}) {
    const QuantWeight table = make_weight(q, kV, k, 7400 + static_cast<uint32_t>(k));
    std::vector<int32_t> ids = random_ints(33, 0, kV - 1, 7401);
#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // the CPU refuses ids outside the table
    ids[3] = -1;
    ids[10] = static_cast<int32_t>(kV);
#endif
    const OwnedTensor id_t =
        OwnedTensor::from_vector(ids, Shape{static_cast<int64_t>(ids.size())}, kTestGpu);
    std::vector<float> want;
    for (int32_t id : ids) {
      if (id < 0 || id >= kV) {
        want.insert(want.end(), static_cast<size_t>(k), 0.0f);
      } else {
        want.insert(want.end(), table.values.begin() + id * k, table.values.begin() + (id + 1) * k);
      }
    }
    for (DType out_dtype : kFloatDTypes) {
      const Shape shape{static_cast<int64_t>(ids.size()), k};
      const OwnedTensor out = OwnedTensor::zeros(out_dtype, shape, kTestGpu);
      gather_rows(ctx.gpu, table.matrix(), id_t, out);
      ctx.gpu.synchronize();
      // The reference rounded to the output dtype (nearest even, as the host's conversion).
      const OwnedTensor rounded = make_tensor(want, out_dtype, shape, Device::cpu());
      expect_equal(out, rounded,
                   std::string(quant_type_name(q)) + " K=" + std::to_string(k) + " -> " +
                       name_of(out_dtype));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaGatherQuant, ::testing::ValuesIn(kQuantTypes), quant_name);

}  // namespace
}  // namespace dspark::test
