// The block formats of core/quant.h against the `gguf` package (gguf.quants.dequantize, the
// Python reference that ships with llama.cpp): tests/data/quant/T.blocks are random blocks of
// every type and T.f32 the package's values for them (tools/gguf/make_quant_fixtures.py,
// tests/data/quant/SOURCE.md). dequantize_blocks must reproduce them bit for bit, one block at a
// time and all at once (Q8_A and the MLX group types, which GGUF does not have, against NumPy:
// mlx_quant_test.cpp). Plus the table of block sizes, names and the row-length check, and the
// expansion of the MLX group types into their 32-value blocks (expand_quant_groups, what CUDA
// uploads): the same values bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/core/quant.h"

namespace dspark {
namespace {

std::vector<uint8_t> read_byte_vector(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class QuantFormat : public ::testing::TestWithParam<QuantType> {};
class GgufQuantFormat : public ::testing::TestWithParam<QuantType> {};

TEST_P(GgufQuantFormat, MatchesTheGgufPackageBitForBit) {
  const QuantType type = GetParam();
  const std::string name = lower(quant_type_name(type));
  const auto dir = test::data_dir() / "quant";
  const std::vector<uint8_t> blocks = read_byte_vector(dir / (name + ".blocks"));
  const std::vector<uint8_t> raw = read_byte_vector(dir / (name + ".f32"));
  const QuantBlock qb = quant_block(type);
  ASSERT_GT(blocks.size(), 0u);
  ASSERT_EQ(blocks.size() % static_cast<size_t>(qb.bytes), 0u);
  const int64_t n_blocks = static_cast<int64_t>(blocks.size()) / qb.bytes;
  ASSERT_EQ(raw.size(), static_cast<size_t>(n_blocks * qb.elements) * sizeof(float));
  std::vector<float> want(raw.size() / sizeof(float));
  std::memcpy(want.data(), raw.data(), raw.size());

  // All blocks in one call.
  std::vector<float> got(want.size(), -1.0f);
  dequantize_blocks(type, blocks.data(), n_blocks, got.data());
  int mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (bits_of(got[i]) != bits_of(want[i]) && ++mismatches <= 8) {
      ADD_FAILURE() << name << " block " << i / static_cast<size_t>(qb.elements) << " value "
                    << i % static_cast<size_t>(qb.elements) << ": got " << got[i] << " (0x"
                    << std::hex << bits_of(got[i]) << "), gguf " << want[i] << " (0x"
                    << bits_of(want[i]) << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << name;

  // Block by block (no state carried between blocks).
  std::vector<float> one(static_cast<size_t>(qb.elements));
  for (int64_t b = 0; b < n_blocks; ++b) {
    dequantize_blocks(type, blocks.data() + b * qb.bytes, 1, one.data());
    EXPECT_EQ(std::memcmp(one.data(), want.data() + b * qb.elements, one.size() * sizeof(float)), 0)
        << name << " block " << b;
  }
}

TEST_P(QuantFormat, SizesNamesAndRowLengths) {
  const QuantType type = GetParam();
  const QuantBlock qb = quant_block(type);
  const std::string_view name = quant_type_name(type);
  EXPECT_EQ(quant_type_from_name(name), type);
  EXPECT_EQ(quant_type_from_name(lower(name)), type);
  EXPECT_EQ(quant_row_bytes(type, 0), 0);
  EXPECT_EQ(quant_row_bytes(type, qb.elements), qb.bytes);
  EXPECT_EQ(quant_row_bytes(type, 7 * qb.elements), 7 * qb.bytes);
  for (const int64_t bad : {int64_t{1}, qb.elements - 1, qb.elements + 16, int64_t{-qb.elements}}) {
    try {
      (void)quant_row_bytes(type, bad);
      ADD_FAILURE() << name << ": a row of " << bad << " values was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.what();
    }
  }
}

std::string quant_format_param_name(const ::testing::TestParamInfo<QuantType>& p) {
  return std::string(quant_type_name(p.param));
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantFormat, ::testing::ValuesIn(kQuantTypes),
                         quant_format_param_name);
INSTANTIATE_TEST_SUITE_P(MlxGroups, QuantFormat, ::testing::ValuesIn(kGroupQuantTypes),
                         quant_format_param_name);
INSTANTIATE_TEST_SUITE_P(GgufTypes, GgufQuantFormat, ::testing::ValuesIn(kGgufQuantTypes),
                         quant_format_param_name);

TEST(QuantFormatTable, BlockSizesAndNames) {
  struct Row {
    QuantType type;
    const char* name;
    int64_t elements, bytes;
  };
  // ggml's GGML_QUANT_SIZES (gguf.constants) for the GGUF types; Q8_A: f16 d, m, 32 bytes; the
  // MLX group types f16 d, m and 4 or 8 bits per value.
  const Row rows[] = {
      {QuantType::q4_0, "Q4_0", 32, 18},        {QuantType::q4_1, "Q4_1", 32, 20},
      {QuantType::q5_0, "Q5_0", 32, 22},        {QuantType::q5_1, "Q5_1", 32, 24},
      {QuantType::q8_0, "Q8_0", 32, 34},        {QuantType::q4_k, "Q4_K", 256, 144},
      {QuantType::q5_k, "Q5_K", 256, 176},      {QuantType::q6_k, "Q6_K", 256, 210},
      {QuantType::q8_a, "Q8_A", 32, 36},        {QuantType::q4_a64, "Q4_A64", 64, 36},
      {QuantType::q4_a128, "Q4_A128", 128, 68}, {QuantType::q8_a64, "Q8_A64", 64, 68},
      {QuantType::q8_a128, "Q8_A128", 128, 132}};
  ASSERT_EQ(std::size(rows), kQuantTypes.size() + kGroupQuantTypes.size());
  for (const Row& r : rows) {
    EXPECT_EQ(quant_type_name(r.type), r.name);
    EXPECT_EQ(quant_block(r.type).elements, r.elements) << r.name;
    EXPECT_EQ(quant_block(r.type).bytes, r.bytes) << r.name;
  }
  EXPECT_EQ(quant_type_from_name("q4_k"), QuantType::q4_k);
  EXPECT_EQ(quant_type_from_name("Q4_K_M"), std::nullopt);
  EXPECT_EQ(quant_type_from_name("Q2_K"), std::nullopt);
  EXPECT_EQ(quant_type_from_name("F16"), std::nullopt);
  EXPECT_EQ(quant_type_from_name(""), std::nullopt);
}

// Each group of 64 / 128 values becomes 2 / 4 blocks of its unit type (Q4_1, Q8_A) with the
// group's d and m and the unit's codes; the values are the same bit for bit. Other types are
// their own unit type and are copied.
TEST(QuantFormatGroups, ExpandToTheirUnitBlocks) {
  for (const QuantType type : kGroupQuantTypes) {
    const QuantType unit = quant_unit_type(type);
    EXPECT_EQ(unit, quant_type_name(type)[1] == '4' ? QuantType::q4_1 : QuantType::q8_a);
    const QuantBlock qb = quant_block(type), ub = quant_block(unit);
    const int64_t n_blocks = 7, units = qb.elements / 32, codes = ub.bytes - 4;
    const std::vector<uint8_t> src = test::random_quant_blocks(type, 1, n_blocks * qb.elements, 5);
    std::vector<uint8_t> dst(static_cast<size_t>(n_blocks * units * ub.bytes), 0xAB);
    expand_quant_groups(type, src.data(), n_blocks, dst.data());
    for (int64_t b = 0; b < n_blocks; ++b)
      for (int64_t u = 0; u < units; ++u) {
        const uint8_t* g = src.data() + b * qb.bytes;
        const uint8_t* o = dst.data() + (b * units + u) * ub.bytes;
        EXPECT_EQ(std::memcmp(o, g, 4), 0) << quant_type_name(type) << " group " << b;
        EXPECT_EQ(std::memcmp(o + 4, g + 4 + u * codes, static_cast<size_t>(codes)), 0)
            << quant_type_name(type) << " group " << b << " unit " << u;
      }
    std::vector<float> want(static_cast<size_t>(n_blocks * qb.elements)), got(want.size());
    dequantize_blocks(type, src.data(), n_blocks, want.data());
    dequantize_blocks(unit, dst.data(), n_blocks * units, got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
        << quant_type_name(type);
  }
  for (const QuantType type : kQuantTypes) {
    EXPECT_EQ(quant_unit_type(type), type);
    const std::vector<uint8_t> src = test::random_quant_blocks(type, 1, 2 * 256, 6);
    std::vector<uint8_t> dst(src.size());
    expand_quant_groups(type, src.data(), 2 * 256 / quant_block(type).elements, dst.data());
    EXPECT_EQ(dst, src) << quant_type_name(type);
  }
}

}  // namespace
}  // namespace dspark
