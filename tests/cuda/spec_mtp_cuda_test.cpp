// The MTP draft source on CUDA (f32, the tiny MLA / GQA + MoE fixtures, GLM-5's with sparse
// attention): greedy and coupled speculative decoding equal plain decoding, and the bigram
// fixture's drafts are accepted (see common/mtp_checks.h).
#include <gtest/gtest.h>

#include <unistd.h>

#include "common/mtp_checks.h"
#include "cuda_consistency.h"

namespace dspark {
namespace {

class CudaMtp : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMtp, GreedyAndCoupledSpeculativeEqualPlain) {
  DSPARK_REQUIRE_CUDA();
  const std::filesystem::path dir = test::mtp_fixture_dir(GetParam());
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << "fixture missing";
  EXPECT_GT(test::check_mtp_lossless(dir, test::kTestGpu).drafted, 0);
}

TEST_P(CudaMtp, BigramFixtureAcceptsTheDrafts) {
  DSPARK_REQUIRE_CUDA();
  if (!std::filesystem::exists(test::mtp_fixture_dir(GetParam()) / "config.json"))
    GTEST_SKIP() << "fixture missing";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("dspark_mtp_bigram_cuda_" + GetParam() + "_" + std::to_string(::getpid()));
  test::write_bigram_mtp_fixture(GetParam(), out);
  const test::MtpLosslessStats s = test::check_mtp_lossless(out, test::kTestGpu);
  std::filesystem::remove_all(out);
  EXPECT_GT(s.acceptance(), 0.95);
}

INSTANTIATE_TEST_SUITE_P(Families, CudaMtp,
                         ::testing::Values("deepseek_v3", "glm4_moe", "glm_moe_dsa"));

}  // namespace
}  // namespace dspark
