#include "common/stat_test.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace dspark::test {
namespace {
// Inverse of the standard normal upper tail (Acklam-style rational approximation is overkill for
// the few tails we use; bisection on erfc is exact enough).
double normal_upper_quantile(double tail) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > tail)
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}
}  // namespace

int64_t stat_samples(int64_t requested) {
  if (const char* env = std::getenv("DSPARK_STAT_SAMPLES")) {
    const long long n = std::atoll(env);
    if (n > 0) return n;
  }
  return requested;
}

double chi_square_quantile(int dof, double upper_tail) {
  const double z = normal_upper_quantile(upper_tail);
  const double k = dof;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

GTestResult g_test(const std::vector<int64_t>& observed, const std::vector<double>& expected_p,
                   double false_alarm) {
  GTestResult r;
  int64_t total = 0;
  for (int64_t o : observed) total += o;
  int cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (expected_p[i] <= 0) {
      r.impossible += observed[i];
      continue;
    }
    ++cells;
    const double e = expected_p[i] * static_cast<double>(total);
    if (observed[i] > 0) r.g += 2.0 * observed[i] * std::log(observed[i] / e);
  }
  r.dof = cells - 1;
  r.threshold = r.dof > 0 ? chi_square_quantile(r.dof, false_alarm) : 0.0;
  return r;
}

std::string GTestResult::summary() const {
  return fmt::format("G = {:.2f}, dof = {}, threshold(1e-3) = {:.2f}, impossible = {}", g, dof,
                     threshold, impossible);
}

}  // namespace dspark::test
