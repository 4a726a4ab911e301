// Greedy losslessness of the block drafter through engine/speculative.h on the CPU (f32): the
// tiny qwen3 / llama3 targets, every layout (and the qwen3_moe target with two of them), gamma in
// {4, 7, 16}, with and without confidence thresholds, six prompts batched (see
// unit/dspark_drafter_testing.h).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

std::string lossless_case_name(const ::testing::TestParamInfo<test::LosslessCase>& info) {
  const test::LosslessCase& c = info.param;
  return fmt::format("{}_{}_{}_g{}{}", c.target, c.layout, c.markov, c.gamma,
                     c.thresholds ? "_thr" : "");
}

class DSparkLossless : public ::testing::TestWithParam<test::LosslessCase> {};

TEST_P(DSparkLossless, GreedySpeculativeEqualsPlainGreedy) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dspark_lossless_cpu_" + lossless_case_name({GetParam(), 0}));
  test::check_dspark_lossless(GetParam(), Device::cpu(), dir);
}

std::vector<test::LosslessCase> lossless_cases() {
  std::vector<test::LosslessCase> out;
  for (const std::string target : {"qwen3", "llama3"})
    for (int gamma : {4, 7, 16})
      for (bool thr : {false, true}) {
        out.push_back({target, "deepspec", "vanilla", gamma, thr});
        out.push_back({target, "dflash", "none", gamma, thr});
      }
  out.push_back({"qwen3", "specforge", "gated", 7, true});
  out.push_back({"llama3", "specforge", "rnn", 7, true});
  // A mixture-of-experts target (its taps come from layers with and without experts).
  out.push_back({"qwen3_moe", "deepspec", "vanilla", 7, true});
  out.push_back({"qwen3_moe", "dflash", "none", 16, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DSparkLossless, ::testing::ValuesIn(lossless_cases()),
                         lossless_case_name);

// The published-layout fixtures (tools/dspark_ref drafters of the tiny targets) through the
// engine: greedy speculative output == plain greedy, gamma in {4, 7, 16}.
TEST(DSparkLosslessFixtures, GreedySpeculativeEqualsPlainGreedy) {
  int ran = 0;
  for (const test::FixtureName& f : test::drafter_fixtures()) {
    const auto dir = test::drafter_fixture_dir(f.fixture);
    const auto target_dir = test::data_dir() / "models" / f.target;
    if (!std::filesystem::exists(dir / "config.json") ||
        !std::filesystem::exists(target_dir / "config.json"))
      continue;
    ++ran;
    Context ctx(Device::cpu());
    auto target = load_model(target_dir, Device::cpu(), DType::f32);
    GenerateOptions o;
    o.max_tokens = 24;
    o.eos_token_ids = {};
    const auto prompts = test::lossless_prompts(target->config().vocab_size);
    std::vector<std::vector<int32_t>> plain;
    for (const auto& p : prompts) plain.push_back(generate(*target, ctx, p, o).tokens);
    for (int gamma : {4, 7, 16}) {
      DSparkSourceOptions opt;
      opt.block_size = gamma;
      auto source = load_dspark_source(dir, *target, opt, false);
      std::vector<RequestInput> reqs;
      for (const auto& p : prompts) reqs.push_back(RequestInput{p, o, nullptr, {}});
      SpecConfig cfg;
      cfg.gamma = gamma;
      const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
      SpecTelemetry total;
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(out[i].result.tokens, plain[i]) << f.fixture << " gamma " << gamma;
        total.merge(out[i].spec);
      }
      const DSparkStats& ds = source->dspark_stats();
      EXPECT_EQ(ds.n_rows_projected + ds.n_rows_dropped, ds.n_rows_committed);
      std::printf("[ lossless ] fixture %-19s gamma=%2d rounds=%lld drafted=%lld accepted=%lld\n",
                  f.fixture.c_str(), gamma, static_cast<long long>(total.rounds),
                  static_cast<long long>(total.drafted), static_cast<long long>(total.accepted));
    }
  }
  if (ran == 0) GTEST_SKIP() << "no drafter fixtures";
}

// Greedy and sampled requests in one batch: the proposal carries q for every row (one-hot for the
// greedy ones) and the greedy rows still emit exactly the plain greedy tokens.
TEST(DSparkLosslessMixed, GreedyRowsInASampledBatch) {
  const auto target_dir = test::data_dir() / "models" / "qwen3";
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no qwen3";
  Context ctx(Device::cpu());
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  const auto dir = std::filesystem::temp_directory_path() / "dspark_lossless_mixed";
  test::TinyDrafterSpec spec;
  spec.block_size = 5;
  test::write_tiny_drafter(dir, spec, target->config());
  const auto prompts = test::lossless_prompts(target->config().vocab_size);
  std::vector<RequestInput> reqs;
  std::vector<std::vector<int32_t>> plain(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions o;
    o.max_tokens = 20;
    o.eos_token_ids = {};
    if (i % 2 == 1) {
      o.sampling.temperature = 0.9f;
      o.seed = 100 + i;
    } else {
      plain[i] = generate(*target, ctx, prompts[i], o).tokens;
    }
    reqs.push_back(RequestInput{prompts[i], o, nullptr, {}});
  }
  auto source = load_dspark_source(dir, *target);
  SpecConfig cfg;
  cfg.gamma = 5;
  const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
  for (size_t i = 0; i < prompts.size(); i += 2) EXPECT_EQ(out[i].result.tokens, plain[i]) << i;
  for (size_t i = 1; i < prompts.size(); i += 2) EXPECT_EQ(out[i].result.tokens.size(), 20u);
}

}  // namespace
}  // namespace dspark
