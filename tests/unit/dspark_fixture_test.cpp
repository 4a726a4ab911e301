// The block drafter (CPU, f32) against the fixtures of the independent PyTorch reference
// (tests/data/drafters/<name>, tools/dspark_ref; docs/drafter-goldens.md): DeepSpec (vanilla and
// RNN heads), SpecForge (gated head), z-lab DFlash and a DeepSpec drafter of the llama3 target,
// for gamma in {4, 7, 16}: our target's taps and the context features, the block's hidden states,
// base and corrected logits within relative RMS 1e-4, identical greedy tokens and proposals,
// confidences within 1e-5. Skips a fixture that is not there.
#include <gtest/gtest.h>

#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

std::string fixture_name(const ::testing::TestParamInfo<test::FixtureName>& p) {
  return p.param.fixture;
}

class DSparkFixture : public ::testing::TestWithParam<test::FixtureName> {};

TEST_P(DSparkFixture, MatchesPyTorchReference) {
  const test::FixtureName& f = GetParam();
  const test::FixtureResult r =
      test::run_drafter_fixture(f.fixture, f.target, Device::cpu(), DType::f32, 0.0);
  if (!r.present) GTEST_SKIP() << "fixture " << f.fixture << " missing";
  std::printf("[ fixture  ] %-19s taps %.2e features %.2e\n", f.fixture.c_str(), r.taps,
              r.features);
  EXPECT_LE(r.taps, 1e-4);
  EXPECT_LE(r.features, 1e-4);
  ASSERT_EQ(r.gammas.size(), 3u);
  for (const test::FixtureGamma& g : r.gammas) {
    std::printf("[ fixture  ] %-19s g%-2d hidden %.2e base %.2e z %.2e conf %.2e tokens %d/%d\n",
                f.fixture.c_str(), g.gamma, g.hidden, g.base, g.corrected, g.confidence,
                g.tokens_equal, g.tokens);
    EXPECT_LE(g.hidden, 1e-4) << "gamma " << g.gamma;
    EXPECT_LE(g.base, 1e-4) << "gamma " << g.gamma;
    EXPECT_LE(g.corrected, 1e-4) << "gamma " << g.gamma;
    EXPECT_LE(g.confidence, 1e-5) << "gamma " << g.gamma;
    EXPECT_EQ(g.tokens_equal, g.tokens) << "gamma " << g.gamma;
    EXPECT_EQ(g.proposal, g.expected_proposal) << "gamma " << g.gamma;
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, DSparkFixture, ::testing::ValuesIn(test::drafter_fixtures()),
                         fixture_name);

}  // namespace
}  // namespace dspark
