// The CPU small-M product (backend/cpu/kernels/small_m_gemm.h), on every ISA this CPU runs:
//  - accuracy against a naive double-precision loop over many shapes (odd K and N tails, M = 1..20,
//    strided x and y, bias, 16-bit weights and outputs), with an error bound derived from the
//    summation (below);
//  - batch invariance: row r of an M-row call is bitwise equal to a 1-row call on that row, for
//    every M, whatever the thread count; 16-bit weights give the bits of f32 weights holding the
//    same values; and through linear() (ops/matmul.h) for every M it routes to this kernel.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cpu/kernels/small_m_gemm.h"
#include "dspark/core/thread_pool.h"
#include "dspark/ops/matmul.h"

namespace dspark {
namespace {

using cpu::SmallGemmArgs;
using cpu::SmallGemmIsa;

std::vector<SmallGemmIsa> isas() {
  std::vector<SmallGemmIsa> v = {SmallGemmIsa::portable};
  if (cpu::small_gemm_has_avx2()) v.push_back(SmallGemmIsa::avx2);
  return v;
}

// Values of `dtype` (rounded from N(0, stddev)) as f32, plus their raw storage.
struct Values {
  std::vector<float> f32;     // the values, exactly
  std::vector<uint16_t> raw;  // bf16/f16 bits (empty for f32)
};

Values random_values(size_t n, uint32_t seed, float stddev, DType dtype) {
  Values v;
  v.f32 = test::random_normal(n, seed, stddev);
  if (dtype == DType::bf16 || dtype == DType::f16) {
    v.raw.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (dtype == DType::bf16) {
        v.raw[i] = f32_to_bf16(v.f32[i]).bits;
        v.f32[i] = bf16_to_f32(bf16{v.raw[i]});
      } else {
        v.raw[i] = f32_to_f16(v.f32[i]).bits;
        v.f32[i] = f16_to_f32(f16{v.raw[i]});
      }
    }
  }
  return v;
}

struct Problem {
  int64_t m, n, k, ldx, ldy;
  DType w_dtype = DType::f32, y_dtype = DType::f32;
  bool bias = false;
  std::vector<float> x;  // [m, ldx]
  Values w;              // [n, k]
  std::vector<float> b;  // [n] or empty
};

Problem make_problem(int64_t m, int64_t n, int64_t k, int64_t x_pad, int64_t y_pad, DType w_dtype,
                     DType y_dtype, bool bias, uint32_t seed) {
  Problem p{m, n, k, k + x_pad, n + y_pad, w_dtype, y_dtype, bias, {}, {}, {}};
  p.x = test::random_normal(static_cast<size_t>(std::max<int64_t>(m * p.ldx, 1)), seed);
  p.w = random_values(static_cast<size_t>(n * k), seed + 1, 0.2f, w_dtype);
  if (bias) p.b = test::random_normal(static_cast<size_t>(n), seed + 2);
  return p;
}

// y as f32 values (with the padding columns, which hold a sentinel before the call).
constexpr float kSentinel = -12345.0f;

std::vector<float> run(const Problem& p, SmallGemmIsa isa, ThreadPool& pool, int64_t row0 = 0,
                       int64_t rows = -1) {
  if (rows < 0) rows = p.m;
  const size_t y_count = static_cast<size_t>(std::max<int64_t>(rows * p.ldy, 1));
  std::vector<float> y32(y_count, kSentinel);
  std::vector<uint16_t> y16(y_count);
  for (size_t i = 0; i < y_count; ++i)
    y16[i] = p.y_dtype == DType::bf16 ? f32_to_bf16(kSentinel).bits : f32_to_f16(kSentinel).bits;
  SmallGemmArgs a;
  a.x = p.x.data() + row0 * p.ldx;
  a.ldx = p.ldx;
  a.w = p.w_dtype == DType::f32 ? static_cast<const void*>(p.w.f32.data())
                                : static_cast<const void*>(p.w.raw.data());
  a.w_dtype = p.w_dtype;
  a.bias = p.b.empty() ? nullptr : p.b.data();
  a.y = p.y_dtype == DType::f32 ? static_cast<void*>(y32.data()) : static_cast<void*>(y16.data());
  a.y_dtype = p.y_dtype;
  a.ldy = p.ldy;
  a.m = rows;
  a.n = p.n;
  a.k = p.k;
  cpu::small_gemm(pool, a, isa);
  if (p.y_dtype == DType::bf16)
    for (size_t i = 0; i < y_count; ++i) y32[i] = bf16_to_f32(bf16{y16[i]});
  if (p.y_dtype == DType::f16)
    for (size_t i = 0; i < y_count; ++i) y32[i] = f16_to_f32(f16{y16[i]});
  return y32;
}

// Checks y against the double-precision reference. Error bound per element: the kernel rounds
// each product (portable path; the fused multiply-adds of the AVX2 path do not), sums K of them in
// 8 partial sums of ceil(K/8) terms each, adds those in a tree of depth 3, then adds the bias, so
// |y - exact| <= gamma_{ceil(K/8) + 5} * (sum |x_i w_i| + |b|) with gamma_n ~ n * 2^-24 (f32
// unit roundoff); a 16-bit output adds its own rounding, at most 2^-9 (bf16) or 2^-12 (f16) of
// |y| (checked with twice that).
void check_accuracy(const Problem& p, const std::vector<float>& y) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = 1.01 * static_cast<double>((p.k + 7) / 8 + 5) * u;
  const double out_rel = p.y_dtype == DType::bf16  ? std::ldexp(1.0, -8)
                         : p.y_dtype == DType::f16 ? std::ldexp(1.0, -11)
                                                   : 0.0;
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t j = 0; j < p.ldy; ++j) {
      const float got = y[static_cast<size_t>(r * p.ldy + j)];
      if (j >= p.n) {  // padding untouched
        ASSERT_EQ(got, p.y_dtype == DType::f32    ? kSentinel
                       : p.y_dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(kSentinel))
                                                  : f16_to_f32(f32_to_f16(kSentinel)))
            << "row " << r << " col " << j;
        continue;
      }
      double exact = p.b.empty() ? 0.0 : p.b[static_cast<size_t>(j)];
      double magnitude = std::fabs(exact);
      for (int64_t i = 0; i < p.k; ++i) {
        const double t = static_cast<double>(p.x[static_cast<size_t>(r * p.ldx + i)]) *
                         p.w.f32[static_cast<size_t>(j * p.k + i)];
        exact += t;
        magnitude += std::fabs(t);
      }
      const double bound = gamma * magnitude + out_rel * std::fabs(exact) * 1.01 + 1e-30;
      ASSERT_LE(std::fabs(got - exact), bound)
          << "row " << r << " col " << j << " got " << got << " exact " << exact;
    }
  }
}

std::string describe(const Problem& p, SmallGemmIsa isa) {
  return fmt::format("isa={} M={} N={} K={} ldx={} ldy={} w={} y={} bias={}",
                     cpu::small_gemm_isa_name(isa), p.m, p.n, p.k, p.ldx, p.ldy,
                     dtype_name(p.w_dtype), dtype_name(p.y_dtype), p.bias);
}

TEST(CpuSmallGemm, MatchesDoubleReferenceF32) {
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (SmallGemmIsa isa : isas())
    for (int64_t m = 1; m <= 20; ++m)
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1},
                          {5, 3},
                          {12, 8},
                          {13, 17},
                          {25, 64},
                          {37, 129},
                          {100, 576},
                          {7, 1031}})
        for (bool bias : {false, true}) {
          const Problem p = make_problem(m, n, k, m % 3 == 0 ? 0 : 5, m % 2 == 0 ? 0 : 3,
                                         DType::f32, DType::f32, bias, ++seed);
          SCOPED_TRACE(describe(p, isa));
          check_accuracy(p, run(p, isa, pool));
        }
}

TEST(CpuSmallGemm, MatchesDoubleReference16Bit) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (SmallGemmIsa isa : isas())
    for (int64_t m : {1, 3, 4, 7, 8, 16})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 5}, {29, 77}, {48, 576}})
        for (auto [wd, yd] : {std::pair{DType::bf16, DType::f32},
                              {DType::f16, DType::f32},
                              {DType::f32, DType::bf16},
                              {DType::bf16, DType::bf16},
                              {DType::f16, DType::f16}}) {
          const Problem p = make_problem(m, n, k, 2, 1, wd, yd, true, ++seed);
          SCOPED_TRACE(describe(p, isa));
          check_accuracy(p, run(p, isa, pool));
        }
}

TEST(CpuSmallGemm, EmptyShapes) {
  ThreadPool pool(2);
  for (SmallGemmIsa isa : isas()) {
    // K = 0: y = bias (or 0).
    Problem p = make_problem(3, 13, 0, 0, 2, DType::f32, DType::f32, true, 7);
    std::vector<float> y = run(p, isa, pool);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 0; j < 13; ++j) EXPECT_EQ(y[r * 15 + j], p.b[j]);
    p.b.clear();
    y = run(p, isa, pool);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 0; j < 13; ++j) EXPECT_EQ(y[r * 15 + j], 0.0f);
    // M = 0 and N = 0 write nothing.
    Problem e = make_problem(2, 4, 8, 0, 0, DType::f32, DType::f32, false, 8);
    SmallGemmArgs a;
    float y0 = kSentinel;
    a.x = e.x.data();
    a.ldx = 8;
    a.w = e.w.f32.data();
    a.y = &y0;
    a.ldy = 4;
    a.k = 8;
    a.m = 0;
    a.n = 4;
    cpu::small_gemm(pool, a, isa);
    a.m = 2;
    a.n = 0;
    cpu::small_gemm(pool, a, isa);
    EXPECT_EQ(y0, kSentinel);
  }
}

// Row r of an M-row call == the 1-row call on row r, bit for bit, for every M <= 20, with 1, 2 and
// 3 threads (different splits of N).
TEST(CpuSmallGemm, BatchInvariantBitwise) {
  ThreadPool pool1(1), pool2(2), pool3(3);
  uint32_t seed = 500;
  for (SmallGemmIsa isa : isas())
    for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 129}, {300, 576}, {61, 1536}, {25, 13}})
      for (DType wd : {DType::f32, DType::bf16}) {
        const Problem p = make_problem(20, n, k, 3, 2, wd, DType::f32, true, ++seed);
        SCOPED_TRACE(describe(p, isa));
        std::vector<std::vector<float>> single(20);
        for (int64_t r = 0; r < 20; ++r) single[r] = run(p, isa, pool1, r, 1);
        for (int64_t m = 1; m <= 20; ++m) {
          for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
            // rows [20 - m, 20): every row lands at a different position for each M
            const std::vector<float> y = run(p, isa, *pool, 20 - m, m);
            for (int64_t i = 0; i < m; ++i) {
              const int64_t r = 20 - m + i;
              ASSERT_EQ(std::memcmp(y.data() + i * p.ldy, single[r].data(), n * sizeof(float)), 0)
                  << "M=" << m << " row " << r << " threads " << pool->size();
            }
          }
        }
      }
}

// bf16/f16 weights are converted exactly: the same bits as f32 weights holding those values.
TEST(CpuSmallGemm, SixteenBitWeightsMatchF32Bitwise) {
  ThreadPool pool(2);
  for (SmallGemmIsa isa : isas())
    for (DType wd : {DType::bf16, DType::f16}) {
      Problem p16 = make_problem(9, 45, 203, 1, 0, wd, DType::f32, true, 900);
      Problem p32 = p16;
      p32.w_dtype = DType::f32;
      SCOPED_TRACE(describe(p16, isa));
      const std::vector<float> a = run(p16, isa, pool), b = run(p32, isa, pool);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    }
}

// Through the op: every M that linear() routes to the small kernel gives each row the bits of the
// 1-row call (so a verify forward of gamma + 1 rows reproduces decode steps exactly).
TEST(CpuSmallGemm, LinearOpIsBatchInvariant) {
  Context ctx(Device::cpu());
  const int64_t n = 200, k = 576, rows = cpu::kSmallGemmMaxRows;
  for (DType wd : {DType::f32, DType::bf16}) {
    OwnedTensor x = test::random_tensor(DType::f32, Shape{rows, k}, 11);
    OwnedTensor w = test::random_tensor(wd, Shape{n, k}, 12, 0.1f);
    OwnedTensor bias = test::random_tensor(DType::f32, Shape{n}, 13);
    OwnedTensor single(DType::f32, Shape{rows, n}, Device::cpu());
    for (int64_t r = 0; r < rows; ++r)
      linear(ctx, x.view().rows(r, r + 1), w, bias, single.view().rows(r, r + 1));
    for (int64_t m = 2; m <= rows; ++m) {
      OwnedTensor y(DType::f32, Shape{m, n}, Device::cpu());
      linear(ctx, x.view().rows(0, m), w, bias, y);
      ASSERT_EQ(std::memcmp(y->data(), single->data(), static_cast<size_t>(m * n) * 4), 0)
          << "M=" << m << " w=" << dtype_name(wd);
    }
  }
}

TEST(CpuSmallGemm, RejectsBadArguments) {
  ThreadPool pool(1);
  std::vector<float> x(16), w(16), y(16);
  SmallGemmArgs a;
  a.x = x.data();
  a.w = w.data();
  a.y = y.data();
  a.m = 2;
  a.n = 2;
  a.k = 4;
  a.ldx = 3;  // < k
  a.ldy = 2;
  EXPECT_THROW(cpu::small_gemm(pool, a), Error);
  a.ldx = 4;
  a.w_dtype = DType::i32;
  EXPECT_THROW(cpu::small_gemm(pool, a), Error);
}

}  // namespace
}  // namespace dspark
