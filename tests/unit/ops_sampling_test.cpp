// Logit processing and sampling: hand-checkable cases, a literal O(V^2) reference of the
// threshold definitions in ops/sampling.h, and chi-square tests of sample()'s frequencies.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/stat_test.h"
#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/philox.h"
#include "dspark/ops/sampling.h"

namespace dspark {
namespace {

using test::make_tensor;

// The definitions of ops/sampling.h taken literally (counts and sums over all tokens), in double
// apart from z = f32(logit) / T, which the contract fixes in f32.
std::vector<double> process_reference(const std::vector<float>& logits, const SamplingParams& sp) {
  const size_t v = logits.size();
  std::vector<double> out(v, 0.0);
  if (sp.greedy()) {
    size_t best = 0;
    for (size_t i = 1; i < v; ++i)
      if (logits[i] > logits[best]) best = i;
    out[best] = 1.0;
    return out;
  }
  std::vector<float> z(v);
  for (size_t i = 0; i < v; ++i) z[i] = logits[i] / sp.temperature;
  std::vector<bool> kept(v, true);
  if (sp.top_k > 0) {
    for (size_t x = 0; x < v; ++x) {
      int64_t greater = 0;
      for (size_t y = 0; y < v; ++y) greater += z[y] > z[x];
      kept[x] = greater < sp.top_k;
    }
  }
  double m = -INFINITY;
  for (size_t i = 0; i < v; ++i)
    if (kept[i]) m = std::max(m, static_cast<double>(z[i]));
  std::vector<double> e(v, 0.0);
  double s = 0;
  for (size_t i = 0; i < v; ++i) {
    if (kept[i]) e[i] = std::exp(z[i] - m);
    s += e[i];
  }
  std::vector<double> p(v);
  for (size_t i = 0; i < v; ++i) p[i] = e[i] / s;
  std::vector<bool> kept_p = kept;
  if (sp.top_p < 1.0f) {
    // A token outside top-k has p = 0, so it is never above another: the literal sum needs no
    // `kept` test (one load per term, which the sanitizer build's O(V^2) loop feels).
    for (size_t x = 0; x < v; ++x) {
      if (!kept[x]) continue;
      const double px = p[x];
      double above = 0;
      for (size_t y = 0; y < v; ++y)
        if (p[y] > px) above += p[y];
      kept_p[x] = above < sp.top_p;
    }
  }
  double p_max = 0;
  for (size_t i = 0; i < v; ++i)
    if (kept[i]) p_max = std::max(p_max, p[i]);
  double kept_sum = 0;
  for (size_t i = 0; i < v; ++i) {
    if (kept_p[i] && p[i] >= sp.min_p * p_max)
      kept_sum += e[i];
    else
      e[i] = 0;
  }
  for (size_t i = 0; i < v; ++i) out[i] = e[i] / kept_sum;
  return out;
}

std::vector<float> process(Context& ctx, const std::vector<float>& logits, int64_t n, int64_t v,
                           std::span<const SamplingParams> params, DType dtype = DType::f32) {
  OwnedTensor x = make_tensor(logits, dtype, Shape{n, v}, Device::cpu());
  OwnedTensor probs(DType::f32, Shape{n, v}, Device::cpu());
  process_logits(ctx, x, params, probs);
  return to_f32_vector(probs);
}

std::vector<float> process1(Context& ctx, const std::vector<float>& logits,
                            const SamplingParams& sp) {
  return process(ctx, logits, 1, static_cast<int64_t>(logits.size()), std::span(&sp, 1));
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want,
                  double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(got[i], 0.0f) << "token " << i << " must be removed";
    } else {
      EXPECT_NEAR(got[i], want[i], tol * want[i] + 1e-12) << "token " << i;
    }
  }
}

TEST(OpsSampling, ValidateNamesTheBadField) {
  auto expect_invalid = [](SamplingParams sp, int64_t vocab, const std::string& field) {
    try {
      validate(sp, vocab);
      ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  expect_invalid({-0.5f, 0, 1.0f, 0.0f}, 10, "temperature");
  expect_invalid({NAN, 0, 1.0f, 0.0f}, 10, "temperature");
  expect_invalid({1.0f, -1, 1.0f, 0.0f}, 10, "top_k");
  expect_invalid({1.0f, 0, 0.0f, 0.0f}, 10, "top_p");
  expect_invalid({1.0f, 0, 1.5f, 0.0f}, 10, "top_p");
  expect_invalid({1.0f, 0, 1.0f, -0.1f}, 10, "min_p");
  expect_invalid({1.0f, 0, 1.0f, 1.1f}, 10, "min_p");
  expect_invalid({1.0f, 0, 1.0f, 0.0f}, 0, "vocab");
  EXPECT_NO_THROW(validate({0.0f, 0, 1.0f, 0.0f}, 10));
  EXPECT_NO_THROW(validate({0.7f, 50, 0.9f, 0.05f}, 10));
}

// Each expected distribution below is derived by hand from the definitions.
TEST(OpsSampling, HandCheckedCases) {
  Context ctx(Device::cpu());
  const double ln2 = std::log(2.0);
  {  // top-k = 2 with a three-way tie at the top: #{greater} = 0 < 2 for all three 3s; the 2 has
     // three greater values and the 1 four: kept {0, 2, 4} with 1/3 each.
    SamplingParams sp{1.0f, 2, 1.0f, 0.0f};
    expect_probs(process1(ctx, {3, 1, 3, 2, 3}, sp), {1 / 3.0, 0, 1 / 3.0, 0, 1 / 3.0});
  }
  {  // top-k = 2, no tie: softmax over {4, 3}: 1/(1+e^-1) and e^-1/(1+e^-1).
    SamplingParams sp{1.0f, 2, 1.0f, 0.0f};
    const double a = 1 / (1 + std::exp(-1.0));
    expect_probs(process1(ctx, {4, 3, 1, 2}, sp), {a, 1 - a, 0, 0});
  }
  // p = [1/2, 1/4, 1/8, 1/8] from logits [0, -ln2, -2ln2, -2ln2].
  const std::vector<float> quarter = {0.0f, static_cast<float>(-ln2), static_cast<float>(-2 * ln2),
                                      static_cast<float>(-2 * ln2)};
  {  // top-p 0.7: token 1 has 0.5 above it (< 0.7) -> kept; tokens 2, 3 have 0.75 -> removed.
    SamplingParams sp{1.0f, 0, 0.7f, 0.0f};
    expect_probs(process1(ctx, quarter, sp), {2 / 3.0, 1 / 3.0, 0, 0});
  }
  {  // top-p 0.8: tokens 2 and 3 (tied) have 0.75 above -> both kept: the distribution unchanged.
    SamplingParams sp{1.0f, 0, 0.8f, 0.0f};
    expect_probs(process1(ctx, quarter, sp), {0.5, 0.25, 0.125, 0.125});
  }
  {  // top-p 0.45: only the most probable token (0.5 above every other).
    SamplingParams sp{1.0f, 0, 0.45f, 0.0f};
    expect_probs(process1(ctx, quarter, sp), {1, 0, 0, 0});
  }
  {  // top-p 0.1 with a three-way tie at the top: nothing is above the tied tokens -> all 3 kept.
    SamplingParams sp{1.0f, 0, 0.1f, 0.0f};
    expect_probs(process1(ctx, {1, 1, 1, 0}, sp), {1 / 3.0, 1 / 3.0, 1 / 3.0, 0});
  }
  {  // min-p 0.3: p / p_max = e^-k for logits -k: 1, 0.37, 0.14, 0.05 -> keep the first two.
    SamplingParams sp{1.0f, 0, 1.0f, 0.3f};
    const double a = 1 / (1 + std::exp(-1.0));
    expect_probs(process1(ctx, {0, -1, -2, -3}, sp), {a, 1 - a, 0, 0});
  }
  {  // temperature 2: softmax([0, -2ln2] / 2) = softmax([0, -ln2]) = [2/3, 1/3].
    SamplingParams sp{2.0f, 0, 1.0f, 0.0f};
    expect_probs(process1(ctx, {0.0f, static_cast<float>(-2 * ln2)}, sp), {2 / 3.0, 1 / 3.0});
  }
  {  // -inf and NaN logits get probability 0.
    SamplingParams sp{1.0f, 0, 1.0f, 0.0f};
    expect_probs(process1(ctx, {-INFINITY, 0.0f, NAN, 0.0f}, sp), {0, 0.5, 0, 0.5});
  }
  {  // greedy: one-hot of the first maximum.
    SamplingParams sp{0.0f, 0, 1.0f, 0.0f};
    expect_probs(process1(ctx, {1, 5, 5, 2}, sp), {0, 1, 0, 0});
  }
}

// Random rows (logits rounded to a coarse grid so that ties are common) against the reference.
TEST(OpsSampling, ProcessLogitsMatchesReference) {
  Context ctx(Device::cpu());
  std::mt19937 gen(5);
  const SamplingParams variants[] = {
      {1.0f, 0, 1.0f, 0.0f},        {0.7f, 5, 1.0f, 0.0f},   {1.3f, 0, 0.9f, 0.0f},
      {0.8f, 0, 1.0f, 0.1f},        {1.0f, 40, 0.8f, 0.05f}, {0.5f, 3, 0.5f, 0.2f},
      {2.0f, 1, 1.0f, 0.0f},        {1.0f, 0, 0.3f, 0.0f},   {0.0f, 0, 1.0f, 0.0f},
      {1.0f, 100000, 0.999f, 0.0f},
  };
  int checked = 0;
  for (int64_t v : {1, 3, 17, 127, 1500}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const int64_t n = std::size(variants);
      std::normal_distribution<float> dist(0.0f, 3.0f);
      std::vector<float> logits(static_cast<size_t>(n * v));
      for (float& x : logits) x = std::round(dist(gen) * 4.0f) / 4.0f;  // ties
      std::vector<float> rounded =
          to_f32_vector(make_tensor(logits, dtype, Shape{n, v}, Device::cpu()));
      const auto got = process(ctx, logits, n, v, variants, dtype);
      for (int64_t r = 0; r < n; ++r) {
        SCOPED_TRACE(fmt::format("V={} {} row {}", v, dtype_name(dtype), r));
        const std::vector<float> row(rounded.begin() + r * v, rounded.begin() + (r + 1) * v);
        expect_probs(std::vector<float>(got.begin() + r * v, got.begin() + (r + 1) * v),
                     process_reference(row, variants[r]), 1e-5);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 100);
}

// Top-p over more than the kernel's 1024-candidate first round: nuclei from a handful to
// thousands of tokens (later rounds and the full sort) and a tie group straddling the first
// round's boundary.
TEST(OpsSampling, TopPLargeNucleus) {
  Context ctx(Device::cpu());
  const int64_t v = 10000;
  std::mt19937 gen(9);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const float sigmas[] = {0.3f, 1.0f, 6.0f};
  std::vector<std::vector<float>> rows(4, std::vector<float>(v));
  for (int64_t i = 0; i < v; ++i) {
    for (int r = 0; r < 3; ++r) rows[r][i] = sigmas[r] * dist(gen);
    rows[3][i] = i < 300 ? 1.0f : (i < 2300 ? 0.5f : -0.5f + 0.01f * dist(gen));
  }
  // (row, top_p): nuclei of ~2000 and ~8500 tokens (sigma 0.3), ~6000 (sigma 1), a few (sigma 6),
  // and the 2000-token tie group kept whole across the 1024 boundary.
  for (auto [r, top_p] : {std::pair{0, 0.3f}, {0, 0.9f}, {1, 0.9f}, {2, 0.9f}, {3, 0.3f}}) {
    SCOPED_TRACE(fmt::format("row {} top_p {}", r, top_p));
    const SamplingParams sp{1.0f, 0, top_p, 0.0f};
    const auto got = process1(ctx, rows[r], sp);
    expect_probs(got, process_reference(rows[r], sp), 1e-5);
    if (r == 3) {
      EXPECT_EQ(std::count_if(got.begin(), got.end(), [](float p) { return p > 0; }), 2300);
    }
  }
}

std::vector<int32_t> sample_tokens(Context& ctx, const std::vector<float>& logits, int64_t n,
                                   int64_t v, std::span<const SamplingParams> params,
                                   const std::vector<uint64_t>& seeds,
                                   const std::vector<uint64_t>& counters) {
  OwnedTensor x = make_tensor(logits, DType::f32, Shape{n, v}, Device::cpu());
  OwnedTensor tokens(DType::i32, Shape{n}, Device::cpu());
  sample(ctx, x, params, seeds, counters, tokens);
  return to_vector<int32_t>(tokens);
}

TEST(OpsSampling, GreedySampleIsArgmax) {
  Context ctx(Device::cpu());
  const int64_t n = 33, v = 4099;
  std::vector<float> logits = test::random_normal(static_cast<size_t>(n * v), 3);
  logits[5 * v + 17] = 100.0f;
  logits[5 * v + 18] = 100.0f;  // tie: the smaller index
  const SamplingParams greedy{0.0f, 0, 1.0f, 0.0f};
  const std::vector<uint64_t> seeds(n, 1), counters(n, 2);
  const auto tokens = sample_tokens(ctx, logits, n, v, std::span(&greedy, 1), seeds, counters);
  for (int64_t r = 0; r < n; ++r) {
    int64_t best = 0;
    for (int64_t i = 1; i < v; ++i)
      if (logits[r * v + i] > logits[r * v + best]) best = i;
    EXPECT_EQ(tokens[r], best) << r;
  }
  EXPECT_EQ(tokens[5], 17);
}

// sample() == sample_from_probs(process_logits(...), philox_uniform(seed, counter, lane 0)).
TEST(OpsSampling, SampleIsInverseCdfOfProcessedDistribution) {
  Context ctx(Device::cpu());
  const int64_t n = 64, v = 300;
  const std::vector<float> logits = test::random_normal(static_cast<size_t>(n * v), 4, 2.0f);
  std::vector<SamplingParams> params(n);
  std::vector<uint64_t> seeds(n), counters(n);
  std::vector<float> u(n);
  for (int64_t r = 0; r < n; ++r) {
    params[r] =
        SamplingParams{0.5f + 0.05f * static_cast<float>(r % 10), static_cast<int>(r % 7) * 20,
                       r % 3 == 0 ? 0.9f : 1.0f, r % 4 == 0 ? 0.05f : 0.0f};
    seeds[r] = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(r + 1);
    counters[r] = static_cast<uint64_t>(1000 + 37 * r);
    u[r] = philox_uniform(seeds[r], counters[r], 0);
  }
  const auto tokens = sample_tokens(ctx, logits, n, v, params, seeds, counters);
  OwnedTensor x = make_tensor(logits, DType::f32, Shape{n, v}, Device::cpu());
  OwnedTensor probs(DType::f32, Shape{n, v}, Device::cpu());
  process_logits(ctx, x, params, probs);
  OwnedTensor u_t = OwnedTensor::from_vector(u, Shape{n}, Device::cpu());
  OwnedTensor drawn(DType::i32, Shape{n}, Device::cpu());
  sample_from_probs(ctx, probs, u_t, drawn);
  EXPECT_EQ(tokens, to_vector<int32_t>(drawn));
  // and the inverse CDF itself, in double from the processed probabilities
  const auto pv = to_f32_vector(probs);
  for (int64_t r = 0; r < n; ++r) {
    double total = 0, cum = 0;
    for (int64_t i = 0; i < v; ++i) total += pv[r * v + i];
    int64_t expect = -1;
    for (int64_t i = 0; i < v && expect < 0; ++i) {
      cum += pv[r * v + i];
      if (cum > u[r] * total) expect = i;
    }
    EXPECT_EQ(tokens[r], expect) << r;
    EXPECT_GT(pv[r * v + tokens[r]], 0.0f);
  }
}

TEST(OpsSampling, SampleFromProbsHandCases) {
  Context ctx(Device::cpu());
  // Unnormalised weights [2, 0, 5, 3] (total 10): u * 10 against the cumulative 2, 2, 7, 10.
  const std::vector<float> w = {2, 0, 5, 3};
  const std::vector<std::pair<float, int32_t>> cases = {{0.0f, 0},  {0.19f, 0}, {0.21f, 2},
                                                        {0.69f, 2}, {0.71f, 3}, {0.999f, 3}};
  for (auto [u, expect] : cases) {
    OwnedTensor probs = OwnedTensor::from_vector(w, Shape{1, 4}, Device::cpu());
    OwnedTensor ut = OwnedTensor::from_vector(std::vector<float>{u}, Shape{1}, Device::cpu());
    OwnedTensor tok(DType::i32, Shape{1}, Device::cpu());
    sample_from_probs(ctx, probs, ut, tok);
    EXPECT_EQ(to_vector<int32_t>(tok)[0], expect) << "u = " << u;
  }
}

// Empirical frequencies of sample() vs the reference distribution: Pearson chi-square over the
// kept tokens, threshold the chi-square quantile at false-alarm rate 1e-3 (Wilson-Hilferty), and
// no draw at all of a removed token.
void chi_square_check(Context& ctx, const std::vector<float>& row, const SamplingParams& sp,
                      int64_t n_draws, uint64_t seed_base) {
  const int64_t v = static_cast<int64_t>(row.size());
  std::vector<float> logits;
  logits.reserve(static_cast<size_t>(n_draws * v));
  for (int64_t i = 0; i < n_draws; ++i) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<uint64_t> seeds(n_draws), counters(n_draws);
  for (int64_t i = 0; i < n_draws; ++i) {
    seeds[i] = seed_base + static_cast<uint64_t>(i % 7);  // several seeds and counters
    counters[i] = static_cast<uint64_t>(i / 7);
  }
  const auto tokens = sample_tokens(ctx, logits, n_draws, v, std::span(&sp, 1), seeds, counters);
  const auto p = process_reference(row, sp);
  std::vector<int64_t> counts(v, 0);
  for (int32_t t : tokens) ++counts[t];
  double chi2 = 0;
  int cells = 0;
  for (int64_t i = 0; i < v; ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = p[i] * static_cast<double>(n_draws);
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  ASSERT_GE(cells, 2);
  const double threshold = test::chi_square_quantile(cells - 1, 1e-3);
  EXPECT_LE(chi2, threshold) << "chi2 " << chi2 << " dof " << cells - 1;
}

TEST(OpsSampling, SampleFrequenciesMatchProbabilities) {
  Context ctx(Device::cpu());
  const std::vector<float> row = {2.0f,  1.5f, 1.5f, 0.3f,  -0.2f, 1.0f,
                                  -3.0f, 0.8f, 2.2f, -1.0f, 0.0f,  1.9f};
  chi_square_check(ctx, row, {1.0f, 0, 1.0f, 0.0f}, 30000, 11);
  chi_square_check(ctx, row, {0.7f, 8, 1.0f, 0.0f}, 30000, 22);
  chi_square_check(ctx, row, {1.2f, 0, 0.85f, 0.0f}, 30000, 33);
  chi_square_check(ctx, row, {0.9f, 10, 0.95f, 0.1f}, 30000, 44);
}

TEST(OpsSampling, SampleIsDeterministicForASeed) {
  Context ctx(Device::cpu());
  const int64_t n = 200, v = 50;
  const std::vector<float> logits = test::random_normal(static_cast<size_t>(n * v), 8);
  const SamplingParams sp{1.0f, 0, 1.0f, 0.0f};
  std::vector<uint64_t> seeds(n, 42), counters(n);
  for (int64_t i = 0; i < n; ++i) counters[i] = static_cast<uint64_t>(i);
  const auto a = sample_tokens(ctx, logits, n, v, std::span(&sp, 1), seeds, counters);
  const auto b = sample_tokens(ctx, logits, n, v, std::span(&sp, 1), seeds, counters);
  EXPECT_EQ(a, b);
  std::vector<uint64_t> other(n, 43);
  const auto c = sample_tokens(ctx, logits, n, v, std::span(&sp, 1), other, counters);
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += a[i] != c[i];
  EXPECT_GT(differ, n / 2);  // independent draws from ~50 tokens rarely coincide
}

TEST(OpsSampling, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor x = test::random_tensor(DType::f32, Shape{3, 10}, 1);
  OwnedTensor probs(DType::f32, Shape{3, 10}, Device::cpu());
  const std::vector<SamplingParams> two(2, SamplingParams{1.0f, 0, 1.0f, 0.0f});
  EXPECT_THROW(process_logits(ctx, x, two, probs), Error);
  const SamplingParams bad{1.0f, 0, 2.0f, 0.0f};
  EXPECT_THROW(process_logits(ctx, x, std::span(&bad, 1), probs), Error);
  OwnedTensor probs_bf16(DType::bf16, Shape{3, 10}, Device::cpu());
  const SamplingParams ok{1.0f, 0, 1.0f, 0.0f};
  EXPECT_THROW(process_logits(ctx, x, std::span(&ok, 1), probs_bf16), Error);
  OwnedTensor tokens(DType::i32, Shape{3}, Device::cpu());
  const std::vector<uint64_t> seeds2(2, 1), seeds3(3, 1);
  EXPECT_THROW(sample(ctx, x, std::span(&ok, 1), seeds2, seeds3, tokens), Error);
  EXPECT_THROW(sample(ctx, x, std::span(&ok, 1), seeds3, seeds2, tokens), Error);
  OwnedTensor tokens64(DType::i64, Shape{3}, Device::cpu());
  EXPECT_THROW(sample(ctx, x, std::span(&ok, 1), seeds3, seeds3, tokens64), Error);
  OwnedTensor u = OwnedTensor::from_vector(std::vector<float>{0.1f, 0.2f}, Shape{2}, Device::cpu());
  EXPECT_THROW(sample_from_probs(ctx, probs, u, tokens), Error);
  EXPECT_THROW(sample_from_probs(ctx, probs_bf16, u, tokens), Error);
}

}  // namespace
}  // namespace dspark
