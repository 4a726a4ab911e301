// The CPU attention kernel's lane arithmetic (backend/cpu/kernels/attention_lanes.h) and the
// kernels' exp (fast_exp.h): the AVX2 + FMA versions give the portable versions' bits, and the exp
// stays within 2 ulp of std::exp.
#include "dspark/backend/cpu/kernels/attention_lanes.h"
#include "dspark/backend/cpu/kernels/fast_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/test_util.h"

namespace dspark {
namespace {

namespace al = cpu::attention_lanes;
using test::random_normal;

std::vector<const float*> rows_of(const std::vector<float>& m, int64_t n, int64_t d) {
  std::vector<const float*> rows;
  for (int64_t j = 0; j < n; ++j) rows.push_back(m.data() + j * d);
  return rows;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(CpuFastExp, WithinTwoUlpAndExactAtTheEnds) {
  EXPECT_EQ(cpu::fast_exp::exp1(0.0f), 1.0f);
  EXPECT_EQ(cpu::fast_exp::exp1(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::fast_exp::exp1(-87.5f), 0.0f);
  EXPECT_EQ(cpu::fast_exp::exp1(88.5f), INFINITY);
  for (float x = -87.0f; x <= 88.0f; x += 0.01171875f) {
    const float ref = std::exp(x);
    const float got = cpu::fast_exp::exp1(x);
    EXPECT_LE(std::fabs(got - ref), 2.0f * (std::nextafter(ref, INFINITY) - ref)) << "x = " << x;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void exp8_into(const float* x, float* y) {
  _mm256_storeu_ps(y, cpu::fast_exp::exp8(_mm256_loadu_ps(x)));
}

TEST(CpuFastExp, Exp8GivesExp1Bits) {
  if (!cpu::fast_exp::has_avx2()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::vector<float> x = random_normal(4096, 5, 40.0f);
  x.insert(x.end(), {-INFINITY, INFINITY, 0.0f, -0.0f, -87.0f, 88.0f, -87.01f, 88.5f});
  std::vector<float> y(x.size()), ref(x.size());
  for (size_t i = 0; i + 8 <= x.size(); i += 8) exp8_into(x.data() + i, y.data() + i);
  for (size_t i = 0; i < x.size(); ++i) ref[i] = cpu::fast_exp::exp1(x[i]);
  expect_same_bits(ref, y);
}
#endif

TEST(CpuAttentionLanes, Avx2GivesThePortableBits) {
  if (!al::has_avx2()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  for (const int64_t d : {64, 128, 72}) {
    SCOPED_TRACE(d);
    constexpr int64_t kKeys = 29;
    const std::vector<float> q = random_normal(static_cast<size_t>(d), 1);
    const std::vector<float> k = random_normal(static_cast<size_t>(kKeys * d), 2);
    const std::vector<float> v = random_normal(static_cast<size_t>(kKeys * d), 3);
    const auto krows = rows_of(k, kKeys, d), vrows = rows_of(v, kKeys, d);

    std::vector<float> s_port(kKeys), s_avx(kKeys);
    al::scores(false, q.data(), d, krows.data() + 2, kKeys - 2, s_port.data());
    al::scores(true, q.data(), d, krows.data() + 2, kKeys - 2, s_avx.data());
    expect_same_bits(s_port, s_avx);

    // Weights of 32 scores (the last 3 masked), then the outputs of keys [1, 27).
    std::vector<float> w_port(32, -INFINITY);
    for (int64_t j = 0; j < kKeys; ++j) w_port[static_cast<size_t>(j)] = s_port[j] * 3.0f;
    std::vector<float> w_avx = w_port;
    const float sum_port = al::exp_shifted(false, w_port.data(), 32, 2.5f);
    const float sum_avx = al::exp_shifted(true, w_avx.data(), 32, 2.5f);
    EXPECT_EQ(std::memcmp(&sum_port, &sum_avx, sizeof(float)), 0);
    expect_same_bits(w_port, w_avx);
    EXPECT_EQ(w_port[30], 0.0f);

    std::vector<float> o_port = random_normal(static_cast<size_t>(d), 4);
    std::vector<float> o_avx = o_port;
    al::accumulate(false, w_port.data(), vrows.data(), 1, 27, o_port.data(), d);
    al::accumulate(true, w_avx.data(), vrows.data(), 1, 27, o_avx.data(), d);
    expect_same_bits(o_port, o_avx);
  }
}

TEST(CpuAttentionLanes, ExpLaneGivesExp1Bits) {
  // exp_lane runs exp1 inlined with FMA instructions where the CPU has them: the same bits as
  // exp1's std::fma.
  for (int i = -100000; i <= 100000; ++i) {
    const float x = static_cast<float>(i) * 1.0e-3f;
    const float a = al::exp_lane(x), b = cpu::fast_exp::exp1(x);
    ASSERT_EQ(std::memcmp(&a, &b, sizeof(float)), 0) << x;
  }
  for (const float x : {-INFINITY, INFINITY, 0.0f, -0.0f, -87.0f, 88.0f}) {
    const float a = al::exp_lane(x), b = cpu::fast_exp::exp1(x);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof(float)), 0) << x;
  }
}

TEST(CpuAttentionLanes, MaxOfIgnoresNanAndPadding) {
  std::vector<float> s = random_normal(40, 5);
  s[3] = NAN;
  s[17] = 7.5f;
  for (size_t j = 33; j < s.size(); ++j) s[j] = -INFINITY;
  for (const bool avx2 : {false, true}) {
    if (avx2 && !al::has_avx2()) continue;
    EXPECT_EQ(al::max_of(avx2, s.data(), 40), 7.5f) << avx2;
    EXPECT_EQ(al::max_of(avx2, s.data() + 32, 8), s[32]) << avx2;
    std::vector<float> pad(16, -INFINITY);
    EXPECT_EQ(al::max_of(avx2, pad.data(), 16), -INFINITY) << avx2;
    pad[9] = NAN;
    EXPECT_EQ(al::max_of(avx2, pad.data(), 16), -INFINITY) << avx2;
    pad[2] = -0.0f;
    pad[5] = 0.0f;
    EXPECT_EQ(al::max_of(avx2, pad.data(), 16), 0.0f) << avx2;  // either zero
  }
}

}  // namespace
}  // namespace dspark
