// Goodness-of-fit helpers for the statistical tests of sampling exactness.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dspark::test {

struct GTestResult {
  double g = 0;            // G statistic 2 * sum O ln(O / E) over cells with E > 0
  int dof = 0;             // cells with E > 0, minus one
  double threshold = 0;    // chi-square quantile at 1 - false_alarm for dof
  int64_t impossible = 0;  // observations in cells with E == 0 (must be zero)
  bool pass() const { return impossible == 0 && g <= threshold; }
  std::string summary() const;
};

// observed: counts per cell; expected_p: probabilities per cell (sum 1).
GTestResult g_test(const std::vector<int64_t>& observed, const std::vector<double>& expected_p,
                   double false_alarm = 1e-3);

// Number of samples for a statistical test: `requested`, or DSPARK_STAT_SAMPLES from the
// environment when set (the sanitizer build uses fewer samples: less power, same false-alarm rate).
int64_t stat_samples(int64_t requested);

// Chi-square quantile (Wilson-Hilferty approximation; accurate to ~1% for dof >= 3).
double chi_square_quantile(int dof, double upper_tail);

}  // namespace dspark::test
