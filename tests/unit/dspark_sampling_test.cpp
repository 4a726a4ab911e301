// Sampling exactness of speculative decoding with the block drafter as the draft source: a micro
// target (vocabulary 8) and a tiny random drafter written here; the joint distribution of the
// first three emitted tokens must match the target's exact distribution (enumerated with plain
// forwards of every prefix) by a G-test at false-alarm rate 1e-3. The drafter samples its blocks
// (q = processed Markov-corrected logits), so acceptance is neither ~0 nor ~1. Rejection and
// coupled speculative sampling (the drafter then drafts with the target's own uniforms).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/joint3.h"
#include "common/micro_model.h"
#include "common/stat_test.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

const std::vector<int32_t> kPrompt = {1, 5, 2, 6};

std::filesystem::path micro_dir(const std::string& name) {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::filesystem::temp_directory_path() / ("dspark_sampling_" + test + "_" + name);
}

void check_exactness(const std::string& layout, const std::string& markov, const SamplingParams& sp,
                     int64_t n_samples) {
  n_samples = test::stat_samples(n_samples);
  test::write_micro_llama(micro_dir("target"), test::MicroModelSpec{.seed = 3});
  Context ctx(Device::cpu());
  auto target = load_model(micro_dir("target"), Device::cpu(), DType::f32);
  test::TinyDrafterSpec spec;
  spec.layout = layout;
  spec.markov = markov;
  spec.layers = 1;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 8;
  spec.intermediate = 32;
  spec.rank = 4;
  spec.block_size = 4;
  spec.taps = {-1, 0};
  spec.mask_token_id = 7;
  spec.std = 0.4f;
  test::write_tiny_drafter(micro_dir("drafter"), spec, target->config());
  const std::vector<double> expected = test::exact_joint3(*target, ctx, kPrompt, sp);

  DSparkSourceOptions opt;
  opt.kv_tokens = 20000 * 32;
  auto source = load_dspark_source(micro_dir("drafter"), *target, opt);
  const test::Joint3Run run =
      test::sample_joint3(*target, ctx, source.get(), kPrompt, sp, n_samples, 4, 6, 7);
  const std::vector<int64_t>& observed = run.observed;
  const SpecTelemetry& total = run.spec;
  const test::GTestResult g = test::g_test(observed, expected, 1e-3);
  std::printf(
      "[ exact    ] dspark %s/%s %s T=%.1f top_k=%d top_p=%.2f samples=%lld tau=%.2f "
      "accept=%.3f: %s\n",
      layout.c_str(), markov.c_str(), sp.spec == SpecSampling::coupled ? "coupled" : "rejection",
      sp.temperature, sp.top_k, sp.top_p, static_cast<long long>(n_samples), total.tau(),
      total.acceptance(), g.summary().c_str());
  EXPECT_TRUE(g.pass()) << g.summary();
  // Drafts must be accepted sometimes and rejected sometimes, or the test proves little (random
  // drafters are poor: ~6-30% here, i.e. >= 10^4 accepted drafts over the run).
  EXPECT_GT(total.acceptance(), 0.02);
  EXPECT_LT(total.acceptance(), 0.98);
  const DSparkStats& ds = source->dspark_stats();
  EXPECT_EQ(ds.n_rows_projected + ds.n_rows_dropped, ds.n_rows_committed);
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

TEST(DSparkSamplingEngine, VanillaMarkovMatchesExactDistribution) {
  check_exactness("deepspec", "vanilla", params(1.0f, 0, 1.0f), 100000);
}
TEST(DSparkSamplingEngine, RnnHeadWithTopK) {
  check_exactness("specforge", "rnn", params(0.8f, 4, 1.0f), 100000);
}
TEST(DSparkSamplingEngine, DFlashWithTopP) {
  check_exactness("dflash", "none", params(2.0f, 0, 0.9f), 100000);
}
TEST(DSparkSamplingEngine, CoupledVanillaMarkovMatchesExactDistribution) {
  check_exactness("deepspec", "vanilla", params(1.0f, 0, 1.0f, SpecSampling::coupled), 100000);
}

}  // namespace
}  // namespace dspark
