// MLX affine quantization (io/mlx_quant.h, model/mlx_weights.h) against NumPy:
// tests/data/mlx/unpack.safetensors (tools/mlx/make_mlx_fixtures.py) holds random MLX-quantized
// tensors for bits {2, 3, 4, 5, 6, 8} x group_size {32, 64, 128}, packed by NumPy (3, 5 and 6 bits
// across bytes, as MLX packs them), and NumPy's f32 dequantization; the C++ unpacking and the
// repacking into one block per group (codes of up to 4 bits in Q4_1 / Q4_A64 / Q4_A128 for groups
// of 32 / 64 / 128, of more in Q8_A / Q8_A64 / Q8_A128) must reproduce it bit for bit, and the
// blocks of 4 and 8 bits take the file's bytes. Then the config entry and the errors: unsupported
// bits / group sizes, missing companions.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "common/error_checks.h"
#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/core/quant.h"
#include "dspark/io/mlx_quant.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/mlx_weights.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;

const SafeTensors& unpack_fixture() {
  static const SafeTensors st = SafeTensors::open(test::data_dir() / "mlx" / "unpack.safetensors");
  return st;
}

MlxQuantTensor tensor_of(const SafeTensors& st, const std::string& name, MlxQuantSpec spec) {
  return MlxQuantTensor{name + ".weight", spec, st.get(name + ".weight"), st.get(name + ".scales"),
                        st.get(name + ".biases")};
}

std::vector<float> expected_of(const SafeTensors& st, const std::string& name) {
  const Tensor t = st.get(name + ".expected");
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data(), v.size() * sizeof(float));
  return v;
}

// Bit-for-bit equality of two f32 vectors, reporting the first difference.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " element " << i << ": " << got[i] << " vs NumPy " << want[i];
  }
}

struct MlxQuantCase {
  int bits, group;
};

class MlxUnpack : public ::testing::TestWithParam<MlxQuantCase> {};

QuantType expected_type(int bits, int group) {
  if (bits <= 4)
    return group == 32 ? QuantType::q4_1 : group == 64 ? QuantType::q4_a64 : QuantType::q4_a128;
  return group == 32 ? QuantType::q8_a : group == 64 ? QuantType::q8_a64 : QuantType::q8_a128;
}

TEST_P(MlxUnpack, DequantizesLikeNumPy) {
  const auto [bits, group] = GetParam();
  const std::string name = fmt::format("b{}_g{}", bits, group);
  const MlxQuantTensor t = tensor_of(unpack_fixture(), name, {bits, group});
  const auto [rows, cols] = mlx_quant_shape(t);
  EXPECT_EQ(rows, 6);
  EXPECT_EQ(cols, 256);
  std::vector<float> got(static_cast<size_t>(rows * cols));
  mlx_dequantize(t, got.data());
  expect_same_bits(got, expected_of(unpack_fixture(), name), name);
}

TEST_P(MlxUnpack, RepacksToBlocksOfTheSameValues) {
  const auto [bits, group] = GetParam();
  const std::string name = fmt::format("b{}_g{}", bits, group);
  const MlxQuantTensor t = tensor_of(unpack_fixture(), name, {bits, group});
  const auto [rows, cols] = mlx_quant_shape(t);
  const QuantType type = mlx_block_type({bits, group});
  EXPECT_EQ(type, expected_type(bits, group));
  EXPECT_EQ(quant_block(type).elements, group);
  // The file's bytes for 4 and 8 bits (the codes, a 2-byte scale and bias per group: f16 here,
  // bf16 in mlx-lm's files; the fixture's f32 ones are wider); codes of 2, 3 bits are held in 4,
  // of 5, 6 in 8.
  const int held_bits = bits <= 4 ? 4 : 8;
  EXPECT_EQ(quant_row_bytes(type, cols), cols * held_bits / 8 + cols / group * 4);
  std::vector<uint8_t> blocks(static_cast<size_t>(rows * quant_row_bytes(type, cols)));
  ASSERT_TRUE(mlx_repack_blocks(t, blocks.data()));
  std::vector<float> got(static_cast<size_t>(rows * cols));
  dequantize_blocks(type, blocks.data(), rows * cols / group, got.data());
  expect_same_bits(got, expected_of(unpack_fixture(), name), name);
  // The 32-value blocks CUDA runs (expand_quant_groups) hold the same values.
  const QuantType unit = quant_unit_type(type);
  std::vector<uint8_t> units(static_cast<size_t>(rows * quant_row_bytes(unit, cols)));
  expand_quant_groups(type, blocks.data(), rows * cols / group, units.data());
  std::vector<float> got32(got.size());
  dequantize_blocks(unit, units.data(), rows * cols / 32, got32.data());
  expect_same_bits(got32, expected_of(unpack_fixture(), name), name + " expanded");
}

INSTANTIATE_TEST_SUITE_P(BitsGroups, MlxUnpack, ::testing::ValuesIn([] {
                           std::vector<MlxQuantCase> cases;
                           for (int bits : {2, 3, 4, 5, 6, 8}) {
                             for (int group : {32, 64, 128}) cases.push_back({bits, group});
                           }
                           return cases;
                         }()),
                         [](const auto& p) {
                           return fmt::format("b{}_g{}", p.param.bits, p.param.group);
                         });

TEST(MlxQuant, ScalesNotExactInF16RefuseBlocksButDequantize) {
  for (const int bits : {4, 8}) {
    const std::string name = fmt::format("b{}_g64_inexact", bits);
    const MlxQuantTensor t = tensor_of(unpack_fixture(), name, {bits, 64});
    std::vector<uint8_t> blocks(
        static_cast<size_t>(4 * quant_row_bytes(mlx_block_type({bits, 64}), 128)));
    EXPECT_FALSE(mlx_repack_blocks(t, blocks.data())) << name;
    std::vector<float> got(4 * 128);
    mlx_dequantize(t, got.data());
    expect_same_bits(got, expected_of(unpack_fixture(), name), name);
  }
}

TEST(MlxQuant, WeightsKeepExactTensorsAsBlocks) {
  const SafeTensors& st = unpack_fixture();
  // Every tensor of the fixture: 4-bit with groups of 64 (the others' bits and groups as named).
  const MlxWeights w(st, MlxQuantization{{4, 64},
                                         {{"b4_g32", MlxQuantSpec{4, 32}},
                                          {"b4_g128", MlxQuantSpec{4, 128}},
                                          {"b8_g32", MlxQuantSpec{8, 32}},
                                          {"b8_g64", MlxQuantSpec{8, 64}},
                                          {"b8_g128", MlxQuantSpec{8, 128}},
                                          {"b8_g64_inexact", MlxQuantSpec{8, 64}}}});
  for (const char* name : {"b4_g32", "b4_g64", "b4_g128", "b8_g32", "b8_g64", "b8_g128"}) {
    const std::optional<QuantizedView> v = w.get_quantized(std::string(name) + ".weight");
    ASSERT_TRUE(v.has_value()) << name;
    const QuantType type = expected_type(name[1] - '0', std::atoi(name + 4));
    EXPECT_EQ(v->quant, type);
    EXPECT_EQ(v->n, 6);
    EXPECT_EQ(v->k, 256);
    EXPECT_EQ(v->blocks.nbytes(), static_cast<size_t>(6 * quant_row_bytes(type, 256))) << name;
    std::vector<float> got(6 * 256);
    dequantize_blocks(type, static_cast<const uint8_t*>(v->blocks.data()),
                      6 * 256 / quant_block(type).elements, got.data());
    expect_same_bits(got, expected_of(st, name), name);
  }
  // Not exact in f16: dense, said on stderr. get() dequantizes like NumPy.
  EXPECT_FALSE(w.get_quantized("b4_g64_inexact.weight").has_value());
  EXPECT_FALSE(w.get_quantized("b8_g64_inexact.weight").has_value());
  EXPECT_FALSE(w.get_quantized("b8_g64.expected").has_value());  // a float tensor
  for (const char* name : {"b8_g64", "b4_g64_inexact", "b8_g64_inexact"}) {
    const Tensor t = w.get(std::string(name) + ".weight");
    ASSERT_EQ(t.dtype(), DType::f32);
    std::vector<float> got(static_cast<size_t>(t.numel()));
    std::memcpy(got.data(), t.data(), got.size() * sizeof(float));
    expect_same_bits(got, expected_of(st, name), name);
  }
}

// A scratch directory with a config.json and a model.safetensors written by the test.
class ScratchCheckpoint {
 public:
  ScratchCheckpoint() {
    dir_ = fs::temp_directory_path() / fmt::format("dspark_mlx_quant_{}_{}", ::getpid(), n_++);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~ScratchCheckpoint() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void config(const std::string& json) const { std::ofstream(dir_ / "config.json") << json; }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  static inline int n_ = 0;
};

using test::error_of;
using test::expect_mentions;

TEST(MlxQuant, ReadsTheConfigEntry) {
  ScratchCheckpoint c;
  c.config(R"({"quantization": {"group_size": 64, "bits": 4, "lm_head": false,
               "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8}}})");
  const std::optional<MlxQuantization> q = read_mlx_quantization(c.dir() / "config.json");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->defaults.bits, 4);
  EXPECT_EQ(q->defaults.group_size, 64);
  EXPECT_FALSE(q->spec_of("lm_head").has_value());
  EXPECT_EQ(q->spec_of("model.layers.0.mlp.down_proj")->bits, 8);
  EXPECT_EQ(q->spec_of("model.layers.0.mlp.down_proj")->group_size, 32);
  EXPECT_EQ(q->spec_of("model.layers.0.mlp.up_proj")->group_size, 64);

  c.config(R"({"quantization_config": {"group_size": 32, "bits": 8}})");
  EXPECT_EQ(read_mlx_quantization(c.dir() / "config.json")->defaults.bits, 8);
  // Another method's quantization_config is not MLX's.
  c.config(R"({"quantization_config": {"quant_method": "gptq", "group_size": 128, "bits": 4}})");
  EXPECT_FALSE(read_mlx_quantization(c.dir() / "config.json").has_value());
  c.config(R"({"hidden_size": 8})");
  EXPECT_FALSE(read_mlx_quantization(c.dir() / "config.json").has_value());
  c.config(R"({"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}})");
  expect_mentions(
      error_of([&] { read_mlx_quantization(c.dir() / "config.json"); }, ErrorKind::unsupported),
      {"mxfp4", "affine"});
}

// x.weight: 4 rows of 64 values in `bits` bits; scales / biases for groups of `group`.
void write_quantized(const fs::path& file, int bits, int group, bool with_biases) {
  const int64_t words = 64 * bits / 32;
  std::vector<float> groups(static_cast<size_t>(4 * (64 / group)), 0.5f);
  std::vector<std::pair<std::string, Tensor>> tensors;
  OwnedTensor w(DType::i32, Shape{4, words}, Device::cpu());
  std::memset(w.view().data(), 0x5A, w.view().nbytes());
  OwnedTensor s = OwnedTensor::from_vector(groups, Shape{4, 64 / group}, Device::cpu());
  tensors.emplace_back("x.weight", w.view());
  tensors.emplace_back("x.scales", s.view());
  if (with_biases) tensors.emplace_back("x.biases", s.view());
  write_safetensors(file, tensors);
}

TEST(MlxQuant, UnsupportedBitsOrGroupNameTheTensorAndTheValues) {
  ScratchCheckpoint c;
  const fs::path file = c.dir() / "model.safetensors";
  for (const auto& [bits, group] : {std::pair{7, 32}, std::pair{4, 16}}) {
    write_quantized(file, bits == 7 ? 4 : bits, 32, true);
    const SafeTensors st = SafeTensors::open(file);
    const MlxWeights w(st, MlxQuantization{{bits, group}, {}});
    for (const bool blocks : {false, true}) {
      const std::string msg = error_of(
          [&] {
            if (blocks) {
              w.get_quantized("x.weight");
            } else {
              w.get("x.weight");
            }
          },
          ErrorKind::io);
      expect_mentions(msg, {"'x.weight'", "group_size 32, 64 or 128", "bits 2, 3, 4, 5, 6 or 8"});
      expect_mentions(msg, {fmt::format("bits {} and group_size {}", bits, group).c_str()});
    }
  }
}

TEST(MlxQuant, MissingCompanionIsNamed) {
  ScratchCheckpoint c;
  const fs::path file = c.dir() / "model.safetensors";
  write_quantized(file, 4, 32, false);
  const SafeTensors st = SafeTensors::open(file);
  const MlxWeights w(st, MlxQuantization{{4, 32}, {}});
  expect_mentions(error_of([&] { w.get("x.weight"); }, ErrorKind::io),
                  {"'x.weight'", "'x.biases'", "missing", file.string().c_str()});
  expect_mentions(error_of([&] { w.get_quantized("x.weight"); }, ErrorKind::io),
                  {"'x.weight'", "'x.biases'"});
  // A module the config marks unquantized must not hold U32 words.
  const MlxWeights unmarked(st, MlxQuantization{{4, 32}, {{"x", std::nullopt}}});
  expect_mentions(error_of([&] { unmarked.get("x.weight"); }, ErrorKind::io),
                  {"'x.weight'", "not quantized"});
  // Shapes that disagree: scales for groups of 32 read as groups of 64.
  const fs::path file2 = c.dir() / "other.safetensors";
  write_quantized(file2, 4, 32, true);
  const SafeTensors st2 = SafeTensors::open(file2);
  const MlxWeights w64(st2, MlxQuantization{{4, 64}, {}});
  expect_mentions(error_of([&] { w64.get("x.weight"); }, ErrorKind::io),
                  {"'x.weight'", "scales", "[4, 1]"});
}

}  // namespace
}  // namespace dspark
