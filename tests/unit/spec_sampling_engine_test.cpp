// Sampling exactness through the whole engine: a micro target (vocabulary 8) and a draft model
// whose distribution differs strongly; the joint distribution of the first three emitted tokens
// under speculative sampling must match the target's exact distribution (computed by enumerating
// all prefixes with plain forwards), by a G-test at false-alarm rate 1e-3, with and without top-k /
// top-p, for rejection and coupled speculative sampling. Plain sampling through the same engine is
// checked the same way (a check of the test).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/joint3.h"
#include "common/micro_model.h"
#include "common/stat_test.h"
#include "common/test_util.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_model_source.h"

namespace dspark {
namespace {

const std::vector<int32_t> kPrompt = {1, 5, 2};

// One directory per test: ctest runs the tests of this file in parallel processes.
std::filesystem::path micro_dir(const std::string& name) {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::filesystem::temp_directory_path() / ("dspark_micro_" + test + "_" + name);
}

void check_engine_exactness(const SamplingParams& sp, bool speculative, int64_t n_samples) {
  n_samples = test::stat_samples(n_samples);
  test::write_micro_llama(micro_dir("target"), test::MicroModelSpec{.seed = 1});
  // The draft: the target's weights scaled up (same seed, larger std): correlated with the target
  // but much sharper, so q differs strongly from p while enough drafts are accepted.
  test::write_micro_llama(micro_dir("draft"), test::MicroModelSpec{.seed = 1, .std = 0.9f});
  Context ctx(Device::cpu());
  auto target = load_model(micro_dir("target"), Device::cpu(), DType::f32);
  const std::vector<double> expected = test::exact_joint3(*target, ctx, kPrompt, sp);
  auto source = speculative
                    ? std::make_unique<DraftModelSource>(
                          load_model(micro_dir("draft"), Device::cpu(), DType::f32), 20000 * 32)
                    : nullptr;
  const test::Joint3Run run =
      test::sample_joint3(*target, ctx, source.get(), kPrompt, sp, n_samples, 4, 6, 1);
  const test::GTestResult g = test::g_test(run.observed, expected, 1e-3);
  std::printf(
      "[ exact    ] %s T=%.1f top_k=%d top_p=%.2f samples=%lld tau=%.2f accept=%.3f: "
      "%s\n",
      speculative
          ? (sp.spec == SpecSampling::coupled ? "speculative coupled" : "speculative rejection")
          : "plain",
      sp.temperature, sp.top_k, sp.top_p, static_cast<long long>(n_samples), run.spec.tau(),
      run.spec.acceptance(), g.summary().c_str());
  EXPECT_TRUE(g.pass()) << g.summary();
  if (speculative) {
    // The draft must be accepted sometimes and rejected sometimes, or the test proves little.
    EXPECT_GT(run.spec.acceptance(), 0.05);
    EXPECT_LT(run.spec.acceptance(), 0.95);
  }
}

SamplingParams params(float t, int top_k, float top_p,
                      SpecSampling spec = SpecSampling::rejection) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  p.spec = spec;
  return p;
}

TEST(SpecSamplingEngine, PlainSamplingMatchesExactDistribution) {
  check_engine_exactness(params(1.0f, 0, 1.0f), false, 100000);
}
TEST(SpecSamplingEngine, SpeculativeSamplingMatchesExactDistribution) {
  check_engine_exactness(params(1.0f, 0, 1.0f), true, 100000);
}
TEST(SpecSamplingEngine, SpeculativeSamplingWithTopK) {
  check_engine_exactness(params(0.8f, 4, 1.0f), true, 100000);
}
TEST(SpecSamplingEngine, SpeculativeSamplingWithTopP) {
  check_engine_exactness(params(2.0f, 0, 0.9f), true, 100000);
}
TEST(SpecSamplingEngine, CoupledSamplingMatchesExactDistribution) {
  check_engine_exactness(params(1.0f, 0, 1.0f, SpecSampling::coupled), true, 100000);
}
TEST(SpecSamplingEngine, CoupledSamplingWithTopP) {
  check_engine_exactness(params(2.0f, 0, 0.9f, SpecSampling::coupled), true, 100000);
}

}  // namespace
}  // namespace dspark
