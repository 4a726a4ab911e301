// Threshold and acceptance-curve fitting (spec/dspark/calibration.h) on hand-built observation
// sets whose answers are derived in the comments, and the thresholds file round trip / errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "dspark/core/error.h"
#include "dspark/spec/dspark/calibration.h"

namespace dspark {
namespace {

std::vector<ConfidenceSample> ramp(int position, int n, int accept_from) {
  // Confidences i / n; accepted iff i >= accept_from.
  std::vector<ConfidenceSample> s;
  for (int i = 0; i < n; ++i) {
    const float c = static_cast<float>(i) / static_cast<float>(n);
    s.push_back({position, c, i >= accept_from});
  }
  return s;
}

TEST(DSparkCalibration, SmoothedPrecisionIsLaplace) {
  EXPECT_DOUBLE_EQ(smoothed_precision(0, 0), 0.5);
  EXPECT_DOUBLE_EQ(smoothed_precision(3, 4), 4.0 / 6.0);
}

TEST(DSparkCalibration, SmallestThresholdReachingTheTarget) {
  // 100 observations at position 1, confidences 0.00 .. 0.99, the 40 with c >= 0.6 accepted:
  // overall (40+1)/(100+2) < 0.5. Keeping c >= 0.j keeps 100 - j observations, all 40 accepted
  // ones among them while j <= 60: (41)/(102 - j) >= 0.5 <=> j >= 20, so t = 0.20.
  const auto s = ramp(1, 100, 60);
  const ThresholdFit fit = fit_thresholds(s, 3, ThresholdFitOptions{0.5, 64, 16});
  ASSERT_EQ(fit.thresholds.size(), 3u);
  EXPECT_FLOAT_EQ(fit.thresholds[1], 0.20f);
  EXPECT_EQ(fit.positions[1].n_kept, 80);
  EXPECT_EQ(fit.positions[1].reason, "fits");
  // Position 0 and a position without observations are never pruned.
  EXPECT_EQ(fit.thresholds[0], 0.0f);
  EXPECT_EQ(fit.thresholds[2], 0.0f);
  EXPECT_EQ(fit.positions[2].reason, "thin evidence");

  // A higher target: (41)/(102 - j) >= 0.8 <=> j >= 50.75 -> j = 51, t = 0.51.
  const ThresholdFit strict = fit_thresholds(s, 2, ThresholdFitOptions{0.8, 64, 16});
  EXPECT_FLOAT_EQ(strict.thresholds[1], 0.51f);
}

TEST(DSparkCalibration, PositionZeroIsNeverPruned) {
  const auto s = ramp(0, 200, 1000);  // nothing accepted
  const ThresholdFit fit = fit_thresholds(s, 1, ThresholdFitOptions{});
  EXPECT_EQ(fit.thresholds[0], 0.0f);
  EXPECT_EQ(fit.positions[0].reason, "position 0");
}

TEST(DSparkCalibration, ThinEvidenceMeansNoPruning) {
  const auto s = ramp(1, 63, 1000);  // all rejected, but fewer than min_samples = 64
  const ThresholdFit fit = fit_thresholds(s, 2, ThresholdFitOptions{0.5, 64, 16});
  EXPECT_EQ(fit.thresholds[1], 0.0f);
  EXPECT_EQ(fit.positions[1].reason, "thin evidence");
}

TEST(DSparkCalibration, TargetAlreadyMet) {
  const auto s = ramp(2, 100, 30);  // 70 of 100 accepted: 71/102 >= 0.5
  const ThresholdFit fit = fit_thresholds(s, 3, ThresholdFitOptions{0.5, 64, 16});
  EXPECT_EQ(fit.thresholds[2], 0.0f);
  EXPECT_EQ(fit.positions[2].reason, "target met");
}

TEST(DSparkCalibration, NeverMetPrunesThePosition) {
  // All rejected: every kept set has precision 1/(N+2) < 0.5 -> 1.
  const ThresholdFit none = fit_thresholds(ramp(1, 100, 1000), 2, ThresholdFitOptions{});
  EXPECT_EQ(none.thresholds[1], 1.0f);
  EXPECT_EQ(none.positions[1].reason, "never met");
  // Accepted only at c >= 0.95 (5 observations): reaching 0.5 needs (6)/(102 - j) >= 0.5, i.e.
  // j >= 90, which keeps 10 < min_kept = 16 observations -> never met.
  const ThresholdFit thin_tail = fit_thresholds(ramp(1, 100, 95), 2, ThresholdFitOptions{});
  EXPECT_EQ(thin_tail.thresholds[1], 1.0f);
  // With min_kept = 10 the same data fits at j = 90.
  const ThresholdFit loose = fit_thresholds(ramp(1, 100, 95), 2, ThresholdFitOptions{0.5, 64, 10});
  EXPECT_FLOAT_EQ(loose.thresholds[1], 0.90f);
}

TEST(DSparkCalibration, TiedConfidencesMoveTogether) {
  // 50 observations at c = 0.2 (all rejected) and 50 at c = 0.7 (30 accepted): t = 0.2 keeps all
  // (31/102 < 0.5), t = 0.7 keeps the upper 50: 31/52 >= 0.5.
  std::vector<ConfidenceSample> s;
  for (int i = 0; i < 50; ++i) s.push_back({1, 0.2f, false});
  for (int i = 0; i < 50; ++i) s.push_back({1, 0.7f, i < 30});
  const ThresholdFit fit = fit_thresholds(s, 2, ThresholdFitOptions{});
  EXPECT_FLOAT_EQ(fit.thresholds[1], 0.7f);
  EXPECT_EQ(fit.positions[1].n_kept, 50);
}

TEST(DSparkCalibration, BadTargetIsRejected) {
  EXPECT_THROW(fit_thresholds({}, 2, ThresholdFitOptions{1.5, 64, 16}), Error);
}

TEST(DSparkCalibration, FileRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / "dspark_calibration_file_test";
  std::filesystem::create_directories(dir);
  const auto file = dir / "dspark_thresholds.json";
  ThresholdsFile f;
  f.thresholds = {0.0f, 0.25f, 1.0f};
  f.target_precision = 0.5;
  f.block_size = 3;
  f.n_samples = 42;
  f.positions = fit_thresholds(ramp(1, 100, 60), 3, ThresholdFitOptions{}).positions;
  write_thresholds_file(file, f);
  const ThresholdsFile g = read_thresholds_file(file);
  EXPECT_EQ(g.thresholds, f.thresholds);
  EXPECT_EQ(g.block_size, 3);
  EXPECT_EQ(g.n_samples, 42);
  EXPECT_DOUBLE_EQ(g.target_precision, 0.5);

  auto expect_io = [&](const std::string& text, const std::string& needle) {
    std::ofstream(file) << text;
    try {
      read_thresholds_file(file);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::io);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_io("{}", "thresholds");
  expect_io(R"({"thresholds": [0.1, 2.0]})", "outside [0, 1]");
  expect_io(R"({"thresholds": ["x"]})", "numbers");
  expect_io(R"({"format": "other", "thresholds": []})", "format");
  expect_io("[1, 2", "invalid JSON");
  expect_io(R"({"thresholds": [], "acceptance": {}})", "must be a list");
  expect_io(R"({"thresholds": [], "acceptance": [{"confidence": [0.5], "probability": [0.5]}]})",
            "position");
  expect_io(R"({"thresholds": [], "acceptance": [{"position": 0, "confidence": [0.5]}]})",
            "probability");
  expect_io(R"({"thresholds": [], "acceptance": [{"position": 0, "confidence": [0.5, 0.6],
               "probability": [0.5]}]})",
            "2 confidences but 1 probabilities");
  expect_io(R"({"thresholds": [], "acceptance": [{"position": 0, "confidence": [0.6, 0.5],
               "probability": [0.5, 0.6]}]})",
            "must not decrease");
  expect_io(R"({"thresholds": [], "acceptance": [{"position": 0, "confidence": [0.5],
               "probability": [1.5]}]})",
            "outside [0, 1]");
}

TEST(DSparkCalibration, AcceptanceCurveInterpolatesAndClamps) {
  AcceptanceCurve c;
  c.confidence = {0.2f, 0.6f};
  c.probability = {0.1f, 0.5f};
  EXPECT_FLOAT_EQ(c.at(0.0f), 0.1f);
  EXPECT_FLOAT_EQ(c.at(0.2f), 0.1f);
  EXPECT_FLOAT_EQ(c.at(0.4f), 0.3f);
  EXPECT_FLOAT_EQ(c.at(0.6f), 0.5f);
  EXPECT_FLOAT_EQ(c.at(0.9f), 0.5f);
  EXPECT_FLOAT_EQ(AcceptanceCurve{}.at(0.5f), 0.0f);
}

TEST(DSparkCalibration, AcceptanceCurvesAreBinnedAndMonotone) {
  // Position 0: 400 observations, confidences i / 400, accepted iff i >= 100; bins of 100 give
  // knots at the bins' mean confidences (49.5, 149.5, ...) / 400 with (A + 1) / (N + 2): 1/102,
  // then 101/102 three times. Position 1: acceptance that falls as confidence rises (the first
  // 200 accepted, the last 200 not) is pooled into one knot at the overall rate (201/402).
  // Position 2: too few observations, no curve.
  std::vector<ConfidenceSample> s = ramp(0, 400, 100);
  for (int i = 0; i < 400; ++i) s.push_back({1, static_cast<float>(i) / 400, i < 200});
  for (int i = 0; i < 10; ++i) s.push_back({2, 0.5f, true});
  AcceptanceFitOptions o;
  o.bin_samples = 100;
  const std::vector<AcceptanceCurve> c = fit_acceptance_curves(s, 3, o);
  ASSERT_EQ(c.size(), 3u);
  ASSERT_EQ(c[0].confidence.size(), 4u);
  EXPECT_NEAR(c[0].confidence[0], 49.5 / 400, 1e-6);
  EXPECT_NEAR(c[0].confidence[3], 349.5 / 400, 1e-6);
  EXPECT_NEAR(c[0].probability[0], 1.0 / 102, 1e-6);
  EXPECT_NEAR(c[0].probability[1], 101.0 / 102, 1e-6);
  ASSERT_EQ(c[1].confidence.size(), 1u);
  EXPECT_NEAR(c[1].confidence[0], 199.5 / 400, 1e-6);
  EXPECT_NEAR(c[1].probability[0], 201.0 / 402, 1e-6);
  EXPECT_TRUE(c[2].empty());
  // At most max_bins knots.
  o.max_bins = 2;
  EXPECT_EQ(fit_acceptance_curves(s, 1, o)[0].confidence.size(), 2u);
}

TEST(DSparkCalibration, AcceptanceCurvesRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / "dspark_calibration_curve_test";
  std::filesystem::create_directories(dir);
  const auto file = dir / "dspark_thresholds.json";
  ThresholdsFile f;
  f.thresholds = {0.0f, 0.0f, 0.0f};
  f.acceptance.resize(3);
  f.acceptance[0].confidence = {0.25f, 0.5f};
  f.acceptance[0].probability = {0.125f, 0.75f};
  f.acceptance[2].confidence = {0.5f};
  f.acceptance[2].probability = {0.375f};
  write_thresholds_file(file, f);
  const ThresholdsFile g = read_thresholds_file(file);
  ASSERT_EQ(g.acceptance.size(), 3u);
  EXPECT_EQ(g.acceptance[0].confidence, f.acceptance[0].confidence);
  EXPECT_EQ(g.acceptance[0].probability, f.acceptance[0].probability);
  EXPECT_TRUE(g.acceptance[1].empty());
  EXPECT_EQ(g.acceptance[2].probability, f.acceptance[2].probability);
  // A file without curves reads as none.
  f.acceptance.clear();
  write_thresholds_file(file, f);
  EXPECT_TRUE(read_thresholds_file(file).acceptance.empty());
}

}  // namespace
}  // namespace dspark
