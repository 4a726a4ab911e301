// The block drafter's forward (CPU, f32) against the independent double-precision reference of
// unit/dspark_drafter_testing.h, for every layout and head type, gamma in {4, 7, 16}, on the tiny
// qwen3 and llama3 targets: context features, final hidden states, base and corrected logits
// (relative RMS <= 1e-4), identical greedy tokens, confidences within 1e-5. Rows are batched,
// several rounds are run with forced acceptance counts, and every commit must project exactly
// the committed rows (the context is retained, never re-projected).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "dspark/model/model.h"
#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

std::filesystem::path forward_temp_dir(const std::string& name) {
  return test::per_test_temp_dir("dspark_fwd", name);
}

std::vector<std::vector<int32_t>> prompts(int n, int vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(7 + 5 * i));
    for (auto& t : p) t = tok(gen);
    out.push_back(p);
  }
  return out;
}

struct ForwardCase {
  std::string target;
  std::string layout;
  std::string markov;
  bool conf_markov;
  int gamma;
};

std::string forward_case_name(const ::testing::TestParamInfo<ForwardCase>& info) {
  const ForwardCase& c = info.param;
  return fmt::format("{}_{}_{}{}_g{}", c.target, c.layout, c.markov, c.conf_markov ? "_cm" : "",
                     c.gamma);
}

class DSparkForward : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(DSparkForward, MatchesReferenceOverRounds) {
  const ForwardCase& c = GetParam();
  const auto target_dir = test::data_dir() / "models" / c.target;
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no " << c.target;
  Context ctx(Device::cpu());
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  test::TinyDrafterSpec spec;
  spec.layout = c.layout;
  spec.markov = c.markov;
  spec.confidence_with_markov = c.conf_markov;
  spec.block_size = c.gamma;
  spec.taps = c.layout == "dflash" ? std::vector<int>{-1, 1, 2} : std::vector<int>{0, 2};
  spec.attention_bias = c.markov == "gated";
  spec.own_lm_head = c.markov == "rnn";
  spec.seed = static_cast<uint32_t>(c.gamma * 10 + c.markov.size());
  const auto dir = forward_temp_dir("drafter");
  test::write_tiny_drafter(dir, spec, target->config());
  const test::ReferenceDrafter ref(dir, target_dir);

  DSparkSourceOptions opt;
  opt.block_size = c.gamma;
  opt.record = true;
  // One row alone (context features checked), then three rows batched.
  for (int n_rows : {1, 3}) {
    auto source = load_dspark_source(dir, *target, opt);
    EXPECT_EQ(source->max_drafts(), c.layout == "dflash" ? c.gamma - 1 : c.gamma);
    const test::DriveStats st = test::drive_and_compare(
        *target, ctx, *source, ref, prompts(n_rows, target->config().vocab_size, 3 + n_rows), 4,
        {0, 2, 100, 1});
    std::printf(
        "[ dspark   ] %s rows=%d: features %.2e hidden %.2e base %.2e z %.2e conf %.2e "
        "tokens %lld/%lld\n",
        forward_case_name({c, 0}).c_str(), n_rows, st.features, st.hidden, st.base, st.corrected,
        st.confidence, static_cast<long long>(st.tokens_equal), static_cast<long long>(st.tokens));
    if (n_rows == 1) {
      EXPECT_LE(st.features, 1e-4);
    }
    EXPECT_LE(st.hidden, 1e-4);
    EXPECT_LE(st.base, 1e-4);
    EXPECT_LE(st.corrected, 1e-4);
    EXPECT_LE(st.confidence, 1e-5);
    EXPECT_EQ(st.tokens_equal, st.tokens);
    EXPECT_GT(st.tokens, 0);
    const DSparkStats& ds = source->dspark_stats();
    EXPECT_EQ(ds.n_rows_projected, st.rows_committed);
    EXPECT_EQ(ds.n_rows_committed, st.rows_committed);
    EXPECT_EQ(ds.n_device_reads, ds.n_rounds);
  }
}

std::vector<ForwardCase> forward_cases() {
  std::vector<ForwardCase> out;
  for (const std::string target : {"qwen3", "llama3"}) {
    for (int gamma : {4, 7, 16}) {
      out.push_back({target, "deepspec", "vanilla", true, gamma});
      out.push_back({target, "dflash", "none", false, gamma});
    }
    out.push_back({target, "specforge", "vanilla", false, 7});
    out.push_back({target, "deepspec", "gated", true, 7});
    out.push_back({target, "specforge", "rnn", true, 4});
    out.push_back({target, "deepspec", "none", false, 4});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DSparkForward, ::testing::ValuesIn(forward_cases()),
                         forward_case_name);

// FP8 drafter weights are a CUDA + bf16 path: on the CPU the option is refused with an error that
// names it, before any round runs.
TEST(DSparkForwardFp8, RefusedOnTheCpu) {
  const auto target_dir = test::data_dir() / "models" / "qwen3";
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no qwen3";
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  const auto dir = test::per_test_temp_dir("dspark_forward", "fp8");
  test::TinyDrafterSpec spec;
  test::write_tiny_drafter(dir, spec, target->config());
  DSparkSourceOptions opt;
  opt.fp8_weights = true;
  try {
    auto source = load_dspark_source(dir, *target, opt);
    FAIL() << "FP8 drafter weights were accepted on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--draft-fp8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dspark
