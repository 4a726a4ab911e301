// SafeTensors: reading files built byte by byte here (independent of our writer), the writer's
// byte layout, sharded checkpoints, and one-line io errors for every kind of broken file.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/core/buffer.h"
#include "dspark/io/mapped_file.h"
#include "dspark/io/safetensors.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

using test::read_bytes;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header text and a data section (no padding, no validation).
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Runs `f`, expects a dspark::Error of `kind` whose message contains every `needle`.
template <typename F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << " / " << n;
  }
}

TEST(SafeTensors, ReadsHandBuiltFile) {
  TempDir dir;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -8.5f};
  const std::vector<uint16_t> b = {0x3f80, 0xc000};  // bf16 1.0, -2.0
  const std::vector<int64_t> c = {-3, 1LL << 40};
  const std::vector<uint8_t> d = {1, 0, 1};     // BOOL
  const std::vector<uint8_t> e = {0x38, 0xB8};  // F8_E4M3 1.0, -1.0
  const std::string data = raw(a) + raw(b) + raw(c) + raw(d) + raw(e);
  const std::string header = R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("c":{"dtype":"I64","shape":[2],"data_offsets":[28,44]},)"
                             R"("d":{"dtype":"BOOL","shape":[3],"data_offsets":[44,47]},)"
                             R"("s":{"dtype":"F32","shape":[0,4],"data_offsets":[47,47]},)"
                             R"("e":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[47,49]},)"
                             R"("__metadata__":{"format":"pt","k":"v"}})";
  write_bytes(dir / "x.safetensors", safetensors_bytes(header, data));

  const SafeTensors st = SafeTensors::open(dir / "x.safetensors");
  EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b", "c", "d", "e", "s"}));
  EXPECT_TRUE(st.contains("a"));
  EXPECT_FALSE(st.contains("__metadata__"));
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("k"), "v");

  const Tensor ta = st.get("a");
  EXPECT_EQ(ta.dtype(), DType::f32);
  EXPECT_EQ(ta.shape(), (Shape{2, 3}));
  EXPECT_TRUE(ta.device().is_cpu());
  EXPECT_EQ(to_vector<float>(ta), a);
  const Tensor tb = st.get("b");
  EXPECT_EQ(tb.dtype(), DType::bf16);
  EXPECT_EQ(to_f32_vector(tb), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(to_vector<int64_t>(st.get("c")), c);
  const Tensor td = st.get("d");
  EXPECT_EQ(td.dtype(), DType::u8);
  EXPECT_EQ(to_vector<uint8_t>(td), d);
  EXPECT_EQ(st.get("s").numel(), 0);
  // F8_E4M3: the codes as bytes, marked as E4M3 (io/fp8_quant.h reads them).
  const Tensor te = st.get("e");
  EXPECT_EQ(te.dtype(), DType::u8);
  EXPECT_EQ(to_vector<uint8_t>(te), e);
  EXPECT_TRUE(st.is_e4m3("e"));
  EXPECT_FALSE(st.is_e4m3("d"));
  EXPECT_FALSE(st.is_e4m3("nope"));
  expect_error([&] { (void)st.get("nope"); }, ErrorKind::io, {"'nope'", "not found"});
}

TEST(SafeTensors, WriterLayoutAndRoundTrip) {
  TempDir dir;
  const std::vector<float> f = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> i = {-1, 7, 9};
  const std::vector<int8_t> q = {-128, 127};
  std::vector<uint16_t> h16 = {f32_to_f16(0.5f).bits, f32_to_f16(-1.0f).bits};
  std::vector<uint16_t> b16 = {f32_to_bf16(3.0f).bits};
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w.f32", Tensor(const_cast<float*>(f.data()), DType::f32, Shape{3, 2})},
      {"w.i32", Tensor(const_cast<int32_t*>(i.data()), DType::i32, Shape{3})},
      {"w.i8", Tensor(const_cast<int8_t*>(q.data()), DType::i8, Shape{2})},
      {"w.f16", Tensor(h16.data(), DType::f16, Shape{1, 2})},
      {"w.bf16", Tensor(b16.data(), DType::bf16, Shape{})},
  };
  const fs::path file = dir / "w.safetensors";
  write_safetensors(file, tensors, {{"taps", "[0, 2]"}});

  // The byte layout, checked without our reader.
  const std::string bytes = read_bytes(file);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<uint8_t>(bytes[k]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["taps"], "[0, 2]");
  EXPECT_EQ(header["w.f32"]["dtype"], "F32");
  EXPECT_EQ(header["w.f32"]["shape"], nlohmann::json({3, 2}));
  EXPECT_EQ(header["w.f32"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["w.i32"]["data_offsets"], nlohmann::json({24, 36}));
  EXPECT_EQ(header["w.bf16"]["shape"], nlohmann::json::array());
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 12 + 2 + 4 + 2);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, f.data(), 24), 0);

  const SafeTensors st = SafeTensors::open(file);
  EXPECT_EQ(st.metadata().at("taps"), "[0, 2]");
  EXPECT_EQ(to_vector<float>(st.get("w.f32")), f);
  EXPECT_EQ(to_vector<int32_t>(st.get("w.i32")), i);
  EXPECT_EQ(to_vector<int8_t>(st.get("w.i8")), q);
  EXPECT_EQ(to_f32_vector(st.get("w.f16")), (std::vector<float>{0.5f, -1.0f}));
  const Tensor s = st.get("w.bf16");
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(to_f32_vector(s), (std::vector<float>{3.0f}));

  EXPECT_THROW(write_safetensors(dir / "dup.safetensors", {tensors[0], tensors[0]}), Error);
  const Tensor strided = tensors[0].second.slice(1, 0, 1);
  EXPECT_THROW(write_safetensors(dir / "nc.safetensors", {{"x", strided}}), Error);
}

TEST(SafeTensors, DirectoryResolution) {
  TempDir dir;
  const std::vector<float> v = {1, 2};
  const Tensor t(const_cast<float*>(v.data()), DType::f32, Shape{2});
  // Only file with another name: used.
  write_safetensors(dir / "weights.safetensors", {{"x", t}});
  EXPECT_TRUE(SafeTensors::open(dir.path()).contains("x"));
  // model.safetensors wins over other files.
  write_safetensors(dir / "model.safetensors", {{"y", t}});
  EXPECT_TRUE(SafeTensors::open(dir.path()).contains("y"));
  // Several files, none named model.safetensors, no index: ambiguous.
  fs::remove(dir / "model.safetensors");
  write_safetensors(dir / "other.safetensors", {{"z", t}});
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io,
               {dir.path().string(), "2 .safetensors files"});
  // Empty directory.
  TempDir empty;
  expect_error([&] { SafeTensors::open(empty.path()); }, ErrorKind::io,
               {empty.path().string(), "no model.safetensors.index.json or *.safetensors"});
  expect_error([&] { SafeTensors::open(dir / "missing"); }, ErrorKind::io,
               {"missing", "no such file or directory"});
}

TEST(SafeTensors, Sharded) {
  TempDir dir;
  const std::vector<float> a = {1, 2, 3}, b = {4, 5}, c = {6};
  auto tensor = [](const std::vector<float>& v) {
    return Tensor(const_cast<float*>(v.data()), DType::f32, Shape{static_cast<int64_t>(v.size())});
  };
  write_safetensors(dir / "model-00001-of-00002.safetensors", {{"a", tensor(a)}, {"b", tensor(b)}},
                    {{"format", "pt"}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {{"c", tensor(c)}});
  const std::string index = R"({"metadata":{"total_size":24},"weight_map":{
      "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
      "c":"model-00002-of-00002.safetensors"}})";
  write_bytes(dir / "model.safetensors.index.json", index);
  {
    const SafeTensors st = SafeTensors::open(dir.path());
    EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(to_vector<float>(st.get("a")), a);
    EXPECT_EQ(to_vector<float>(st.get("c")), c);
    EXPECT_EQ(st.metadata().at("format"), "pt");
    EXPECT_EQ(st.path(), dir.path());
  }
  // The index names a shard that does not exist.
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-00001-of-00002.safetensors","c":"gone.safetensors"}})");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io,
               {"gone.safetensors", "file not found"});
  // A tensor in a shard that the index does not list.
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
              R"("c":"model-00002-of-00002.safetensors"}})");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io,
               {"'b'", "not listed in model.safetensors.index.json"});
  // The index lists a tensor no shard has.
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
              R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors",)"
              R"("d":"model-00002-of-00002.safetensors"}})");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io,
               {"'d'", "missing from shard 'model-00002-of-00002.safetensors'"});
  // A tensor listed under the wrong shard.
  write_bytes(dir / "model.safetensors.index.json",
              R"({"weight_map":{"a":"model-00001-of-00002.safetensors",)"
              R"("b":"model-00002-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io, {"'b'", "under shard"});
  // Broken index JSON / no weight_map / path escaping the directory.
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {)");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io,
               {"model.safetensors.index.json", "invalid JSON"});
  write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io, {"'weight_map'"});
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map":{"a":"../x.safetensors"}})");
  expect_error([&] { SafeTensors::open(dir.path()); }, ErrorKind::io, {"not a plain file name"});
}

TEST(SafeTensors, BrokenFiles) {
  TempDir dir;
  const fs::path f = dir / "bad.safetensors";
  const std::string name = f.string();
  auto open_bad = [&](const std::string& bytes) {
    write_bytes(f, bytes);
    (void)SafeTensors::open(f);
  };
  const std::string data8(8, '\0');
  const std::string ok_entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  expect_error([&] { open_bad(""); }, ErrorKind::io, {name, "0 bytes", "8-byte"});
  expect_error([&] { open_bad("abc"); }, ErrorKind::io, {name, "3 bytes"});
  expect_error([&] { open_bad(le64(1000) + "{}"); }, ErrorKind::io,
               {name, "header length 1000 exceeds the file size 10"});
  expect_error([&] { open_bad(le64(~uint64_t{0}) + "{}"); }, ErrorKind::io, {name, "exceeds"});
  expect_error([&] { open_bad(safetensors_bytes("{\"x\": [1,", "")); }, ErrorKind::io,
               {name, "invalid JSON"});
  expect_error([&] { open_bad(safetensors_bytes("[1, 2]", "")); }, ErrorKind::io,
               {name, "not a JSON object"});
  // Offsets beyond the data section (a truncated file).
  expect_error(
      [&] {
        open_bad(
            safetensors_bytes(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8));
      },
      ErrorKind::io, {name, "'x'", "exceed the 8-byte data section"});
  // Offsets inconsistent with shape x dtype.
  expect_error(
      [&] {
        open_bad(
            safetensors_bytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8));
      },
      ErrorKind::io, {name, "'x'", "hold 8 bytes but F32 [3] needs 12"});
  expect_error(
      [&] {
        open_bad(
            safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8));
      },
      ErrorKind::io, {name, "reversed"});
  expect_error(
      [&] {
        open_bad(
            safetensors_bytes(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8));
      },
      ErrorKind::io, {name, "'x'", "non-negative"});
  expect_error(
      [&] {
        open_bad(safetensors_bytes(
            R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
            data8));
      },
      ErrorKind::io, {name, "too large"});
  expect_error(
      [&] { open_bad(safetensors_bytes(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", data8)); },
      ErrorKind::io, {name, "'x'", "'dtype'"});
  expect_error(
      [&] {
        open_bad(
            safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8));
      },
      ErrorKind::io, {name, "'x'", "data_offsets"});
  // Unsupported dtype: its own error kind, naming the tensor and the dtype.
  expect_error(
      [&] {
        open_bad(
            safetensors_bytes(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data8));
      },
      ErrorKind::unsupported, {name, "'w'", "F64"});
  expect_error(
      [&] {
        open_bad(safetensors_bytes(R"({"w":{"dtype":"F8_E5M2","shape":[8],"data_offsets":[0,8]}})",
                                   data8));
      },
      ErrorKind::unsupported, {"'w'", "F8_E5M2", "F8_E4M3"});
  // A valid file, then cut short: the last tensor no longer fits.
  const std::vector<float> v(64, 1.0f);
  write_safetensors(f, {{"x", Tensor(const_cast<float*>(v.data()), DType::f32, Shape{8, 8})}});
  std::string full = read_bytes(f);
  EXPECT_NO_THROW(SafeTensors::open(f));
  expect_error([&] { open_bad(full.substr(0, full.size() - 5)); }, ErrorKind::io,
               {name, "'x'", "truncated"});
  // Cut inside the header.
  expect_error([&] { open_bad(full.substr(0, 20)); }, ErrorKind::io, {name, "exceeds the file"});
  // A sanity check that the good entry format used above is accepted.
  EXPECT_NO_THROW(open_bad(safetensors_bytes("{" + ok_entry + "}", data8)));
}

TEST(MappedFile, MapsAndMoves) {
  TempDir dir;
  write_bytes(dir / "m.bin", "hello");
  MappedFile m(dir / "m.bin");
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(std::memcmp(m.data(), "hello", 5), 0);
  MappedFile moved = std::move(m);
  EXPECT_EQ(m.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
  EXPECT_EQ(moved.size(), 5u);
  write_bytes(dir / "empty.bin", "");
  MappedFile e(dir / "empty.bin");
  EXPECT_EQ(e.size(), 0u);
  expect_error([&] { MappedFile x(dir / "none.bin"); }, ErrorKind::io, {"none.bin", "not found"});
  expect_error([&] { MappedFile x(dir.path()); }, ErrorKind::io, {"not a regular file"});
}

}  // namespace
}  // namespace dspark
