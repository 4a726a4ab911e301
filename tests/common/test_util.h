// Helpers shared by the test suites.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "dspark/core/buffer.h"
#include "dspark/core/quant.h"
#include "dspark/core/tensor.h"

namespace dspark::test {

inline constexpr Device kCpu = Device::cpu();

std::filesystem::path data_dir();    // tests/data
std::filesystem::path source_dir();  // the repository root
// ../shared/assets next to the checkout, or "" when absent (tests that need it skip).
std::filesystem::path shared_assets_dir();
std::filesystem::path gguf_dir();  // tests/data/gguf

// The whole file's bytes ("" when it cannot be read).
std::string read_bytes(const std::filesystem::path& file);

// v rounded to the precision of dtype (f32, bf16 or f16), as a value stored in that dtype reads.
float rounded(float v, DType dtype);

// Relative RMS error ||a - b|| / ||b||  (b is the reference).
double relative_rms_error(const std::vector<float>& a, const std::vector<float>& b);
double max_abs_error(const std::vector<float>& a, const std::vector<float>& b);

// N(0, stddev) values from a fixed-seed generator.
std::vector<float> random_normal(size_t n, uint32_t seed, float stddev = 1.0f);
// A host tensor of `dtype` filled with N(0, stddev).
OwnedTensor random_tensor(DType dtype, Shape shape, uint32_t seed, float stddev = 1.0f,
                          Device device = Device::cpu());
// k distinct ids of [0, experts) per token for n tokens, as a MoE router chooses them ([n * k],
// fixed-seed shuffles).
std::vector<int32_t> random_expert_choices(int64_t n, int64_t experts, int64_t k, uint32_t seed);
// An [n, k] matrix of `q` blocks (k a multiple of the block's values): random bytes, then the
// f16 scales set to sane values (the signs of d random for the symmetric formats; Q4_1 / Q5_1
// mins negative, about -8 d).
std::vector<uint8_t> random_quant_blocks(QuantType q, int64_t n, int64_t k, uint32_t seed);
// Host f32 values -> an OwnedTensor of `dtype` on `device`.
OwnedTensor make_tensor(const std::vector<float>& values, DType dtype, Shape shape, Device device);

// True when a CUDA device is usable (cuda tests GTEST_SKIP otherwise).
bool cuda_available();

// A fresh directory of its own under the system's temporary directory, removed with its contents
// at the end of the scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes `text` to the file `name` in it.
  void write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

}  // namespace dspark::test
