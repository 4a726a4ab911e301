// The verifier alone: greedy prefix rule, and exactness of rejection and coupled speculative
// sampling on a toy Markov chain target with a strongly different Markov chain drafter (G-test on
// the joint distribution of the first three emitted tokens, false-alarm rate 1e-3). Coupled rows
// draft with the target's own uniforms (draft_lane), as the real drafters do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/stat_test.h"
#include "dspark/backend/context.h"
#include "dspark/core/philox.h"
#include "dspark/spec/verifier.h"

namespace dspark {
namespace {

constexpr int kVocab = 5;

// Transition tables: row prev -> distribution of the next token (start state = row kVocab).
using Chain = std::vector<std::vector<double>>;

Chain target_chain() {
  Chain c(kVocab + 1, std::vector<double>(kVocab));
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  for (auto& row : c) {
    double s = 0;
    for (auto& x : row) s += (x = u(gen) * u(gen));
    for (auto& x : row) x /= s;
  }
  return c;
}

// A drafter that differs strongly: reversed preferences, sharper.
Chain draft_chain(const Chain& t) {
  Chain c = t;
  for (auto& row : c) {
    std::reverse(row.begin(), row.end());
    double s = 0;
    for (auto& x : row) s += (x = x * x + 0.01);
    for (auto& x : row) x /= s;
  }
  return c;
}

// The processing of ops/sampling.h written independently for the test (T = 1).
std::vector<double> processed(const std::vector<double>& p, int top_k, double top_p) {
  std::vector<double> out = p;
  for (int i = 0; i < kVocab; ++i) {
    int greater = 0;
    for (int j = 0; j < kVocab; ++j) greater += p[j] > p[i];
    if (top_k > 0 && greater >= top_k) out[i] = 0;
  }
  double s = std::accumulate(out.begin(), out.end(), 0.0);
  for (auto& x : out) x /= s;
  std::vector<double> kept = out;
  for (int i = 0; i < kVocab; ++i) {
    double above = 0;
    for (int j = 0; j < kVocab; ++j)
      if (out[j] > out[i]) above += out[j];
    if (above >= top_p) kept[i] = 0;
  }
  s = std::accumulate(kept.begin(), kept.end(), 0.0);
  for (auto& x : kept) x /= s;
  return kept;
}

struct VerifierCase {
  int top_k;
  double top_p;
  int gamma;
  SpecSampling mode = SpecSampling::rejection;
};

void run_exactness(const VerifierCase& c, int64_t n_samples) {
  n_samples = test::stat_samples(n_samples);
  Context ctx(Device::cpu());
  const Chain t = target_chain();
  const Chain d = draft_chain(t);
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = c.top_k;
  params.top_p = static_cast<float>(c.top_p);
  params.spec = c.mode;
  // Processed chains: what the emitted tokens must follow (target) and what drafts come from.
  Chain tp(t.size()), dp(d.size());
  for (size_t i = 0; i < t.size(); ++i) {
    tp[i] = processed(t[i], c.top_k, c.top_p);
    dp[i] = processed(d[i], c.top_k, c.top_p);
  }
  std::vector<double> expected(kVocab * kVocab * kVocab);
  for (int a = 0; a < kVocab; ++a)
    for (int b = 0; b < kVocab; ++b)
      for (int e = 0; e < kVocab; ++e)
        expected[(a * kVocab + b) * kVocab + e] = tp[kVocab][a] * tp[a][b] * tp[b][e];

  std::vector<int64_t> observed(expected.size(), 0);
  std::mt19937_64 draft_rng(12345);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  auto draw = [&](const std::vector<double>& p, uint64_t seed, int position) {
    double u = c.mode == SpecSampling::coupled
                   ? philox_uniform(seed, static_cast<uint64_t>(position), kLaneSample)
                   : unif(draft_rng);
    double cum = 0;
    for (int i = 0; i < kVocab; ++i) {
      cum += p[i];
      if (u < cum && p[i] > 0) return i;
    }
    for (int i = kVocab - 1; i >= 0; --i)
      if (p[i] > 0) return i;
    return 0;
  };

  constexpr int64_t kBatch = 4096;
  Verifier verifier;
  for (int64_t base = 0; base < n_samples; base += kBatch) {
    const int64_t n = std::min(kBatch, n_samples - base);
    std::vector<std::vector<int>> emitted(static_cast<size_t>(n));
    std::vector<int> position(static_cast<size_t>(n), 1);
    while (true) {
      std::vector<int64_t> live;
      for (int64_t i = 0; i < n; ++i)
        if (emitted[static_cast<size_t>(i)].size() < 3) live.push_back(i);
      if (live.empty()) break;
      Proposal prop;
      std::vector<float> logits, q;
      std::vector<SamplingParams> ps;
      std::vector<uint64_t> seeds;
      std::vector<int32_t> positions;
      for (int64_t i : live) {
        const auto& em = emitted[static_cast<size_t>(i)];
        const uint64_t seed = static_cast<uint64_t>(base + i) * 7919u + 17u;
        int prev = em.empty() ? kVocab : em.back();
        for (int j = 0; j <= c.gamma; ++j) {
          for (int v = 0; v < kVocab; ++v)  // target row j scores draft j given the prefix
            logits.push_back(static_cast<float>(std::log(t[static_cast<size_t>(prev)][v])));
          if (j == c.gamma) break;
          const auto& qrow = dp[static_cast<size_t>(prev)];
          const int x = draw(qrow, seed, position[static_cast<size_t>(i)] + j);
          prop.tokens.push_back(x);
          for (int v = 0; v < kVocab; ++v) q.push_back(static_cast<float>(qrow[v]));
          prev = x;
        }
        prop.indptr.push_back(static_cast<int32_t>(prop.tokens.size()));
        ps.push_back(params);
        seeds.push_back(seed);
        positions.push_back(position[static_cast<size_t>(i)]);
      }
      const int64_t rows = static_cast<int64_t>(logits.size()) / kVocab;
      Tensor lt(logits.data(), DType::f32, Shape{rows, kVocab});
      Tensor qt(q.data(), DType::f32, Shape{static_cast<int64_t>(prop.tokens.size()), kVocab});
      prop.q = qt;
      const VerifyResult r = verifier.verify(ctx, lt, prop, ps, seeds, positions);
      for (size_t li = 0; li < live.size(); ++li) {
        auto& em = emitted[static_cast<size_t>(live[li])];
        const int32_t d0 = prop.indptr[li];
        for (int j = 0; j < r.n_accepted[li]; ++j) em.push_back(prop.tokens[d0 + j]);
        em.push_back(r.next_token[li]);
        position[static_cast<size_t>(live[li])] += r.n_accepted[li] + 1;
      }
    }
    for (const auto& em : emitted) ++observed[(em[0] * kVocab + em[1]) * kVocab + em[2]];
  }
  const test::GTestResult g = test::g_test(observed, expected, 1e-3);
  const char* mode = c.mode == SpecSampling::coupled ? "coupled" : "rejection";
  EXPECT_TRUE(g.pass()) << mode << " top_k=" << c.top_k << " top_p=" << c.top_p
                        << " gamma=" << c.gamma << ": " << g.summary();
  std::printf("[ exact    ] %s top_k=%d top_p=%.2f gamma=%d samples=%lld: %s\n", mode, c.top_k,
              c.top_p, c.gamma, static_cast<long long>(n_samples), g.summary().c_str());
}

TEST(VerifierSampling, JointOfFirstThreeTokensMatchesTarget) {
  run_exactness({0, 1.0, 3}, 200000);
}
TEST(VerifierSampling, JointMatchesWithTopK) {
  run_exactness({3, 1.0, 4}, 200000);
}
TEST(VerifierSampling, JointMatchesWithTopP) {
  run_exactness({0, 0.7, 2}, 200000);
}
TEST(VerifierSampling, CoupledJointOfFirstThreeTokensMatchesTarget) {
  run_exactness({0, 1.0, 3, SpecSampling::coupled}, 200000);
}
TEST(VerifierSampling, CoupledJointMatchesWithTopKAndTopP) {
  run_exactness({3, 0.8, 4, SpecSampling::coupled}, 200000);
}

TEST(VerifierGreedy, LongestMatchingPrefixThenTargetToken) {
  Context ctx(Device::cpu());
  // Two requests: request 0 drafts [2, 1, 4] against target argmaxes [2, 1, 3, 0];
  // request 1 drafts [] (bonus only) with argmax 4.
  const int v = 5;
  std::vector<int> argmaxes = {2, 1, 3, 0, 4};
  std::vector<float> logits(argmaxes.size() * v, 0.0f);
  for (size_t r = 0; r < argmaxes.size(); ++r) logits[r * v + argmaxes[r]] = 5.0f;
  Proposal prop;
  prop.tokens = {2, 1, 4};
  prop.indptr = {0, 3, 3};
  std::vector<SamplingParams> ps(2);
  std::vector<uint64_t> seeds(2, 1);
  std::vector<int32_t> pos = {10, 20};
  Verifier verifier;
  const VerifyResult r =
      verifier.verify(ctx, Tensor(logits.data(), DType::f32, Shape{5, v}), prop, ps, seeds, pos);
  EXPECT_EQ(r.n_accepted, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(r.next_token, (std::vector<int32_t>{3, 4}));
}

TEST(VerifierSampling, GreedyRowsThroughTheSamplingPathMatchArgmax) {
  // A greedy request mixed into a sampled batch: one-hot p, must behave exactly like greedy.
  Context ctx(Device::cpu());
  const int v = 4;
  std::vector<float> logits = {0, 3, 1, 2, /**/ 5, 0, 0, 1, /**/ 0, 0, 9, 0};
  Proposal prop;
  prop.tokens = {1, 0};
  prop.indptr = {0, 2};
  std::vector<float> q = {0, 1, 0, 0, 1, 0, 0, 0};
  prop.q = Tensor(q.data(), DType::f32, Shape{2, v});
  std::vector<SamplingParams> ps(1);  // temperature 0
  std::vector<uint64_t> seeds = {99};
  std::vector<int32_t> pos = {3};
  Verifier verifier;
  const VerifyResult r =
      verifier.verify(ctx, Tensor(logits.data(), DType::f32, Shape{3, v}), prop, ps, seeds, pos);
  EXPECT_EQ(r.n_accepted[0], 2);
  EXPECT_EQ(r.next_token[0], 2);
}

}  // namespace
}  // namespace dspark
