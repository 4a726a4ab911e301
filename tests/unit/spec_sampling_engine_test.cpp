// Sampling exactness through the whole engine: a micro target (vocabulary 8) and a draft model
// whose distribution differs strongly; the joint distribution of the first three emitted tokens
// under speculative sampling must match the target's exact distribution (computed by enumerating
// all prefixes with plain forwards), by a G-test at false-alarm rate 1e-3, with and without top-k /
// top-p. Plain sampling through the same engine is checked the same way (a check of the test).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "common/micro_model.h"
#include "common/stat_test.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "dspark/ops/softmax.h"
#include "dspark/spec/draft_model_source.h"
#include "common/test_util.h"

namespace dspark {
namespace {

constexpr int kVocab = 8;
const std::vector<int32_t> kPrompt = {1, 5, 2};

// One directory per test: ctest runs the tests of this file in parallel processes.
std::filesystem::path micro_dir(const std::string& name) {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::filesystem::temp_directory_path() / ("dspark_micro_" + test + "_" + name);
}

// Temperature / top-k / top-p processing in double, written independently of ops/sampling.
std::vector<double> processed(const std::vector<float>& logits, const SamplingParams& sp) {
  const int v = static_cast<int>(logits.size());
  std::vector<double> z(logits.begin(), logits.end());
  for (auto& x : z) x /= sp.temperature;
  std::vector<bool> keep(static_cast<size_t>(v), true);
  if (sp.top_k > 0)
    for (int i = 0; i < v; ++i) {
      int greater = 0;
      for (int j = 0; j < v; ++j) greater += z[j] > z[i];
      keep[i] = greater < sp.top_k;
    }
  double m = -INFINITY;
  for (int i = 0; i < v; ++i)
    if (keep[i]) m = std::max(m, z[i]);
  std::vector<double> p(static_cast<size_t>(v), 0.0);
  double s = 0;
  for (int i = 0; i < v; ++i)
    if (keep[i]) s += (p[i] = std::exp(z[i] - m));
  for (auto& x : p) x /= s;
  std::vector<double> out = p;
  for (int i = 0; i < v; ++i) {
    double above = 0;
    for (int j = 0; j < v; ++j)
      if (p[j] > p[i]) above += p[j];
    if (!(above < sp.top_p)) out[i] = 0;
  }
  s = std::accumulate(out.begin(), out.end(), 0.0);
  for (auto& x : out) x /= s;
  return out;
}

// Exact P(first three tokens = a, b, c) under `sp`, from plain forwards of every prefix.
std::vector<double> exact_joint(Model& model, Context& ctx, const SamplingParams& sp) {
  std::vector<std::vector<int32_t>> prefixes = {kPrompt};
  for (int a = 0; a < kVocab; ++a) {
    prefixes.push_back(kPrompt);
    prefixes.back().push_back(a);
    for (int b = 0; b < kVocab; ++b) {
      prefixes.push_back(kPrompt);
      prefixes.back().push_back(a);
      prefixes.back().push_back(b);
    }
  }
  PagedKvCache kv(model.kv_shape(16, static_cast<int>(prefixes.size()) + 4), model.device());
  ForwardBatch batch;
  batch.row_indptr.push_back(0);
  for (const auto& p : prefixes) {
    batch.tokens.insert(batch.tokens.end(), p.begin(), p.end());
    batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.logit_indices.push_back(static_cast<int32_t>(batch.tokens.size()) - 1);
    batch.seqs.push_back(kv.create_sequence());
  }
  const std::vector<float> logits = to_f32_vector(model.forward(ctx, kv, batch).logits);
  auto dist = [&](size_t row) {
    return processed(std::vector<float>(logits.begin() + static_cast<int64_t>(row) * kVocab,
                                        logits.begin() + static_cast<int64_t>(row + 1) * kVocab),
                     sp);
  };
  std::vector<double> joint(kVocab * kVocab * kVocab);
  const auto p0 = dist(0);
  size_t row = 1;
  for (int a = 0; a < kVocab; ++a) {
    const auto p1 = dist(row++);
    for (int b = 0; b < kVocab; ++b) {
      const auto p2 = dist(row++);
      for (int c = 0; c < kVocab; ++c) joint[(a * kVocab + b) * kVocab + c] = p0[a] * p1[b] * p2[c];
    }
  }
  return joint;
}

void check_engine_exactness(const SamplingParams& sp, bool speculative, int64_t n_samples) {
  n_samples = test::stat_samples(n_samples);
  test::write_micro_llama(micro_dir("target"), test::MicroModelSpec{.seed = 1});
  // The draft: the target's weights scaled up (same seed, larger std): correlated with the target
  // but much sharper, so q differs strongly from p while enough drafts are accepted.
  test::write_micro_llama(micro_dir("draft"), test::MicroModelSpec{.seed = 1, .std = 0.9f});
  Context ctx(Device::cpu());
  auto target = load_model(micro_dir("target"), Device::cpu(), DType::f32);
  const std::vector<double> expected = exact_joint(*target, ctx, sp);

  constexpr int64_t kBatch = 20000;
  constexpr int kMaxTokens = 6;
  SpecConfig cfg;
  cfg.gamma = 4;
  auto source = speculative ? std::make_unique<DraftModelSource>(
                                  load_model(micro_dir("draft"), Device::cpu(), DType::f32),
                                  static_cast<int>(kBatch) * 32)
                            : nullptr;
  std::vector<int64_t> observed(expected.size(), 0);
  SpecTelemetry total;
  for (int64_t base = 0; base < n_samples; base += kBatch) {
    std::vector<RequestInput> reqs;
    for (int64_t i = base; i < std::min(n_samples, base + kBatch); ++i) {
      RequestInput r;
      r.prompt = kPrompt;
      r.options.sampling = sp;
      r.options.seed = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + 1;
      r.options.max_tokens = kMaxTokens;
      reqs.push_back(std::move(r));
    }
    const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
    for (const auto& o : out) {
      ASSERT_GE(o.result.tokens.size(), 3u);
      const auto& t = o.result.tokens;
      ++observed[(t[0] * kVocab + t[1]) * kVocab + t[2]];
      total.merge(o.spec);
    }
  }
  const test::GTestResult g = test::g_test(observed, expected, 1e-3);
  std::printf("[ exact    ] %s T=%.1f top_k=%d top_p=%.2f samples=%lld tau=%.2f accept=%.3f: %s\n",
              speculative ? "speculative" : "plain", sp.temperature, sp.top_k, sp.top_p,
              static_cast<long long>(n_samples), total.tau(), total.acceptance(),
              g.summary().c_str());
  EXPECT_TRUE(g.pass()) << g.summary();
  if (speculative) {
    // The draft must be accepted sometimes and rejected sometimes, or the test proves little.
    EXPECT_GT(total.acceptance(), 0.05);
    EXPECT_LT(total.acceptance(), 0.95);
  }
}

SamplingParams params(float t, int top_k, float top_p) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

TEST(SpecSamplingEngine, PlainSamplingMatchesExactDistribution) {
  check_engine_exactness(params(1.0f, 0, 1.0f), false, 200000);
}
TEST(SpecSamplingEngine, SpeculativeSamplingMatchesExactDistribution) {
  check_engine_exactness(params(1.0f, 0, 1.0f), true, 200000);
}
TEST(SpecSamplingEngine, SpeculativeSamplingWithTopK) {
  check_engine_exactness(params(0.8f, 4, 1.0f), true, 200000);
}
TEST(SpecSamplingEngine, SpeculativeSamplingWithTopP) {
  check_engine_exactness(params(2.0f, 0, 0.9f), true, 200000);
}

}  // namespace
}  // namespace dspark
