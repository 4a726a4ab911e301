#include "test_util.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/dtype.h"
#include "dspark/core/error.h"

namespace dspark::test {

std::filesystem::path gguf_dir() {
  return data_dir() / "gguf";
}

std::string read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

float rounded(float v, DType dtype) {
  return dispatch_float(dtype, [&]<typename T>(TypeTag<T>) { return to_f32(from_f32<T>(v)); });
}

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

namespace {

void put_half(uint8_t* p, float v) {
  const f16 h = f32_to_f16(v);
  std::memcpy(p, &h, sizeof(h));
}

}  // namespace

std::vector<uint8_t> random_quant_blocks(QuantType q, int64_t n, int64_t k, uint32_t seed) {
  const QuantBlock b = quant_block(q);
  const int64_t blocks = n * (k / b.elements);
  std::vector<uint8_t> data(static_cast<size_t>(blocks * b.bytes));
  std::mt19937 gen(seed);
  for (auto& v : data) v = static_cast<uint8_t>(gen());
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* blk = data.data() + i * b.bytes;
    const float sign = negative(gen) ? -1.0f : 1.0f;
    switch (q) {
      case QuantType::q4_0:
      case QuantType::q5_0:
        put_half(blk, 0.05f * sign * mag(gen));
        break;
      case QuantType::q8_0:
        put_half(blk, 0.005f * sign * mag(gen));
        break;
      case QuantType::q4_1:
      case QuantType::q5_1:
      case QuantType::q4_a64:
      case QuantType::q4_a128:
        put_half(blk, 0.05f * mag(gen));
        put_half(blk + 2, -0.4f * mag(gen));
        break;
      case QuantType::q4_k:
      case QuantType::q5_k:
        put_half(blk, 0.002f * mag(gen));
        put_half(blk + 2, 0.004f * mag(gen));
        break;
      case QuantType::q6_k:
        put_half(blk + 208, 0.0005f * sign * mag(gen));
        break;
      case QuantType::q8_a:
      case QuantType::q8_a64:
      case QuantType::q8_a128:
        put_half(blk, 0.003f * sign * mag(gen));
        put_half(blk + 2, -0.4f * sign * mag(gen));
        break;
    }
  }
  return data;
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
