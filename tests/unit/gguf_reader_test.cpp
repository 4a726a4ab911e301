// GGUF reader and dequantization against gguf-py (tools/gguf/make_fixtures.py writes
// tests/data/gguf/dequant.gguf with random blocks and the golden f32 values gguf-py's
// quants.dequantize computes). Our dequantization follows the same f32 arithmetic, so the
// tolerance is exact equality up to 1 ulp-ish (max abs error <= 1e-6 * max |x|).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/gguf.h"
#include "dspark/io/safetensors.h"

namespace dspark {
namespace {

using test::gguf_dir;

std::vector<float> golden(const SafeTensors& st, const std::string& name) {
  return to_vector<float>(st.get(name));
}

TEST(GgufReader, HeaderAndMetadataOfEveryType) {
  const GgufFile f = GgufFile::open(gguf_dir() / "dequant.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "test");
  EXPECT_EQ(f.get_string("test.string"), "h\xc3\xa9llo");
  EXPECT_EQ(f.get("test.ints").as_ints("test.ints"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get("test.strings").as_strings("test.strings"),
            (std::vector<std::string>{"a", "bb", ""}));
  EXPECT_DOUBLE_EQ(*f.find_double("test.f32"), 0.5);
  EXPECT_TRUE(*f.find_bool("test.bool"));
  EXPECT_EQ(f.get_int("test.u64"), int64_t{1} << 40);
  EXPECT_FALSE(f.find_int("test.absent").has_value());
  // Wrong type: a clear io error naming the key.
  try {
    (void)f.get_int("test.string");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("test.string"), std::string::npos) << e.what();
  }
  // Shapes are row-major: the 3-D tensor written as numpy [2, 3, 4].
  EXPECT_EQ(f.tensor("t.cube").shape, (Shape{2, 3, 4}));
  EXPECT_EQ(f.tensor("t.Q4_K").shape, (Shape{3, 512}));
  EXPECT_EQ(f.tensor("t.Q4_K").type, GgmlType::q4_k);
}

TEST(GgufReader, DequantizeMatchesGgufPy) {
  const GgufFile f = GgufFile::open(gguf_dir() / "dequant.gguf");
  const SafeTensors ref = SafeTensors::open(gguf_dir() / "dequant_golden.safetensors");
  int checked = 0;
  for (const std::string& name : ref.names()) {
    const std::vector<float> want = golden(ref, name);
    const std::vector<float> got = f.dequantize(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    const double err = test::max_abs_error(got, want);
    EXPECT_LE(err, 1e-6 * scale) << name << " (" << ggml_type_name(f.tensor(name).type) << ")";
    EXPECT_GT(scale, 0.0f) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 12);  // F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K + the cube
}

TEST(GgufReader, UnsupportedTypeNamesTensorAndType) {
  const GgufFile f = GgufFile::open(gguf_dir() / "dequant.gguf");
  try {
    (void)f.dequantize("t.Q2_K");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("t.Q2_K"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q2_K"), std::string::npos) << msg;
  }
}

using test::read_bytes;

std::filesystem::path write_temp(const std::string& name, const std::string& bytes) {
  const auto p = std::filesystem::temp_directory_path() / ("dspark_gguf_" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

ErrorKind open_error(const std::filesystem::path& p, std::string* message) {
  try {
    (void)GgufFile::open(p);
  } catch (const Error& e) {
    *message = e.what();
    return e.kind();
  }
  return ErrorKind::internal;
}

TEST(GgufReader, TruncatedAndCorruptFilesFailCleanly) {
  const std::string bytes = read_bytes(gguf_dir() / "dequant.gguf");
  std::string msg;
  // Truncated at many points: always an io error naming the file, never a crash.
  for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, size_t{30}, size_t{200}, bytes.size() / 2,
                     bytes.size() - 1}) {
    const auto p = write_temp("cut.gguf", bytes.substr(0, cut));
    EXPECT_EQ(open_error(p, &msg), ErrorKind::io) << "cut at " << cut << ": " << msg;
    EXPECT_NE(msg.find("dspark_gguf_cut.gguf"), std::string::npos) << msg;
  }
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_EQ(open_error(write_temp("magic.gguf", bad), &msg), ErrorKind::io);
  EXPECT_NE(msg.find("not a GGUF file"), std::string::npos) << msg;
  bad = bytes;
  bad[4] = 1;  // version 1
  EXPECT_EQ(open_error(write_temp("version.gguf", bad), &msg), ErrorKind::unsupported);
  EXPECT_NE(msg.find("version 1"), std::string::npos) << msg;
  bad = bytes;
  bad[8] = '\xff';  // absurd tensor count
  EXPECT_EQ(open_error(write_temp("count.gguf", bad), &msg), ErrorKind::io) << msg;
  // Every single-byte corruption of the header area: an Error (any kind) or success, no crash.
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 600); i += 7) {
    bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    try {
      const GgufFile f = GgufFile::open(write_temp("flip.gguf", bad));
      for (const auto& t : f.tensors()) {
        if (ggml_type_dequantizable(t.type)) (void)f.dequantize(t.name);
      }
    } catch (const Error&) {
    }
  }
}

TEST(GgufReader, UnknownTensorTypeIsUnsupported) {
  std::string bytes = read_bytes(gguf_dir() / "dequant.gguf");
  const GgufFile f = GgufFile::open(gguf_dir() / "dequant.gguf");
  (void)f;
  // The type id follows the dims of the first tensor's info: find "t.F32" and patch its type.
  const size_t at = bytes.find("t.F32");
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + 5 + 4 + 2 * 8;  // name, n_dims, 2 dims
  const uint32_t unknown = 77;
  std::memcpy(bytes.data() + type_at, &unknown, 4);
  std::string msg;
  EXPECT_EQ(open_error(write_temp("type.gguf", bytes), &msg), ErrorKind::unsupported);
  EXPECT_NE(msg.find("t.F32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("77"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dspark
