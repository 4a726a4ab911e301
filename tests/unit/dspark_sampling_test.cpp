// Sampling exactness of speculative decoding with the block drafter as the draft source: a micro
// target (vocabulary 8) and a tiny random drafter written here; the joint distribution of the
// first three emitted tokens must match the target's exact distribution (enumerated with plain
// forwards of every prefix) by a G-test at false-alarm rate 1e-3. The drafter samples its blocks
// (q = processed Markov-corrected logits), so acceptance is neither ~0 nor ~1.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "common/micro_model.h"
#include "common/stat_test.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

constexpr int kVocab = 8;
const std::vector<int32_t> kPrompt = {1, 5, 2, 6};

std::filesystem::path micro_dir(const std::string& name) {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::filesystem::temp_directory_path() / ("dspark_sampling_" + test + "_" + name);
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

void check_exactness(const std::string& layout, const std::string& markov, const SamplingParams& sp,
                     int64_t n_samples) {
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
  const std::vector<double> expected = exact_joint(*target, ctx, sp);

  constexpr int64_t kBatch = 20000;
  constexpr int kMaxTokens = 6;
  DSparkSourceOptions opt;
  opt.kv_tokens = static_cast<int>(kBatch) * 32;
  auto source = load_dspark_source(micro_dir("drafter"), *target, opt);
  SpecConfig cfg;
  cfg.gamma = 4;
  std::vector<int64_t> observed(expected.size(), 0);
  SpecTelemetry total;
  for (int64_t base = 0; base < n_samples; base += kBatch) {
    std::vector<RequestInput> reqs;
    for (int64_t i = base; i < std::min(n_samples, base + kBatch); ++i) {
      RequestInput r;
      r.prompt = kPrompt;
      r.options.sampling = sp;
      r.options.seed = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + 7;
      r.options.max_tokens = kMaxTokens;
      r.options.eos_token_ids = {};
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
  std::printf(
      "[ exact    ] dspark %s/%s T=%.1f top_k=%d top_p=%.2f samples=%lld tau=%.2f "
      "accept=%.3f: %s\n",
      layout.c_str(), markov.c_str(), sp.temperature, sp.top_k, sp.top_p,
      static_cast<long long>(n_samples), total.tau(), total.acceptance(), g.summary().c_str());
  EXPECT_TRUE(g.pass()) << g.summary();
  // Drafts must be accepted sometimes and rejected sometimes, or the test proves little (random
  // drafters are poor: ~6-30% here, i.e. >= 10^4 accepted drafts over the run).
  EXPECT_GT(total.acceptance(), 0.02);
  EXPECT_LT(total.acceptance(), 0.98);
  EXPECT_EQ(source->dspark_stats().n_rows_projected, source->dspark_stats().n_rows_committed);
}

SamplingParams params(float t, int top_k, float top_p) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

TEST(DSparkSamplingEngine, VanillaMarkovMatchesExactDistribution) {
  check_exactness("deepspec", "vanilla", params(1.0f, 0, 1.0f), 200000);
}
TEST(DSparkSamplingEngine, RnnHeadWithTopK) {
  check_exactness("specforge", "rnn", params(0.8f, 4, 1.0f), 200000);
}
TEST(DSparkSamplingEngine, DFlashWithTopP) {
  check_exactness("dflash", "none", params(2.0f, 0, 0.9f), 200000);
}

}  // namespace
}  // namespace dspark
