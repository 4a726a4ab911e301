#include "test_util.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/error.h"

namespace dspark::test {

std::filesystem::path data_dir() {
  return DSPARK_TEST_DATA_DIR;
}
std::filesystem::path source_dir() {
  return DSPARK_SOURCE_DIR;
}

std::filesystem::path shared_assets_dir() {
  if (const char* env = std::getenv("DSPARK_SHARED_ASSETS")) return env;
  const auto p = source_dir().parent_path() / "shared" / "assets";
  return std::filesystem::exists(p) ? p : std::filesystem::path{};
}

double relative_rms_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

std::vector<float> random_normal(size_t n, uint32_t seed, float stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

OwnedTensor make_tensor(const std::vector<float>& values, DType dtype, Shape shape, Device device) {
  OwnedTensor host(dtype, shape, Device::cpu());
  dispatch_float(dtype, [&]<typename T>(TypeTag<T>) {
    T* p = static_cast<T*>(host.view().data());
    for (size_t i = 0; i < values.size(); ++i) p[i] = from_f32<T>(values[i]);
  });
  if (device.is_cpu()) return host;
  return OwnedTensor::copy_of(host.view(), device);
}

OwnedTensor random_tensor(DType dtype, Shape shape, uint32_t seed, float stddev, Device device) {
  return make_tensor(random_normal(static_cast<size_t>(shape.numel()), seed, stddev), dtype, shape,
                     device);
}

std::vector<int32_t> random_expert_choices(int64_t n, int64_t experts, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> all(static_cast<size_t>(experts)), out;
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    out.insert(out.end(), all.begin(), all.begin() + k);
  }
  return out;
}

bool cuda_available() {
  return cuda::built_with_cuda() && cuda::device_count() > 0;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "dspark_test_XXXXXX").string();
  DSPARK_CHECK(mkdtemp(pattern.data()) != nullptr, "cannot create a temporary directory");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void TempDir::write(const std::string& name, const std::string& text) const {
  std::ofstream(path_ / name, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace dspark::test
