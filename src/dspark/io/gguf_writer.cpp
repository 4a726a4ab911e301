#include "dspark/io/gguf_writer.h"

#include <fstream>
#include <type_traits>

#include "dspark/core/error.h"

namespace dspark {
namespace {

constexpr uint64_t kAlignment = 32;

uint64_t align_up(uint64_t v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

class Out {
 public:
  explicit Out(const std::filesystem::path& file)
      : file_(file), out_(file, std::ios::binary | std::ios::trunc) {
    DSPARK_CHECK_KIND(io, out_.good(), "{}: cannot open for writing", file.string());
  }
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes(&v, sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    written_ += n;
  }
  void string(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad() {
    static const char zeros[kAlignment] = {};
    bytes(zeros, align_up(written_) - written_);
  }
  void close() {
    out_.close();
    DSPARK_CHECK_KIND(io, !out_.fail(), "{}: write failed", file_.string());
  }

 private:
  std::filesystem::path file_;
  std::ofstream out_;
  uint64_t written_ = 0;
};

using VT = GgufValue::Type;

// One scalar of `type` from an integer or float value.
template <typename V>
void scalar(Out& o, VT type, V v) {
  switch (type) {
    case VT::u8:
      return o.pod(static_cast<uint8_t>(v));
    case VT::i8:
      return o.pod(static_cast<int8_t>(v));
    case VT::u16:
      return o.pod(static_cast<uint16_t>(v));
    case VT::i16:
      return o.pod(static_cast<int16_t>(v));
    case VT::u32:
      return o.pod(static_cast<uint32_t>(v));
    case VT::i32:
      return o.pod(static_cast<int32_t>(v));
    case VT::f32:
      return o.pod(static_cast<float>(v));
    case VT::boolean:
      return o.pod(static_cast<uint8_t>(v != 0));
    case VT::u64:
      return o.pod(static_cast<uint64_t>(v));
    case VT::i64:
      return o.pod(static_cast<int64_t>(v));
    case VT::f64:
      return o.pod(static_cast<double>(v));
    default:
      DSPARK_FAIL(internal, "gguf writer: {} is not a scalar type", gguf_value_type_name(type));
  }
}

void value(Out& o, const std::string& key, const GgufValue& v) {
  const auto wrong = [&] {
    DSPARK_FAIL(internal, "gguf writer: '{}' holds no {} value", key, gguf_value_type_name(v.type));
  };
  if (v.type == VT::string) {
    const auto* s = std::get_if<std::string>(&v.value);
    if (s == nullptr) wrong();
    return o.string(*s);
  }
  if (v.type != VT::array) {
    if (const auto* i = std::get_if<int64_t>(&v.value)) return scalar(o, v.type, *i);
    if (const auto* u = std::get_if<uint64_t>(&v.value)) return scalar(o, v.type, *u);
    if (const auto* d = std::get_if<double>(&v.value)) return scalar(o, v.type, *d);
    if (const auto* b = std::get_if<bool>(&v.value)) return scalar(o, v.type, *b ? 1 : 0);
    wrong();
  }
  o.pod(static_cast<uint32_t>(v.element_type));
  o.pod<uint64_t>(v.array_size());
  if (const auto* ss = std::get_if<std::vector<std::string>>(&v.value)) {
    for (const std::string& s : *ss) o.string(s);
  } else if (const auto* is = std::get_if<std::vector<int64_t>>(&v.value)) {
    for (int64_t i : *is) scalar(o, v.element_type, i);
  } else if (const auto* us = std::get_if<std::vector<uint64_t>>(&v.value)) {
    for (uint64_t u : *us) scalar(o, v.element_type, u);
  } else if (const auto* ds = std::get_if<std::vector<double>>(&v.value)) {
    for (double d : *ds) scalar(o, v.element_type, d);
  } else {
    wrong();
  }
}

}  // namespace

int64_t gguf_tensor_bytes(GgmlType type, const Shape& shape) {
  const std::optional<GgmlBlock> b = ggml_block(type);
  DSPARK_CHECK(b.has_value() && shape.size() > 0, "gguf_tensor_bytes: {} {}", ggml_type_name(type),
               shape.str());
  const int64_t cols = shape[shape.size() - 1];
  DSPARK_CHECK(cols % b->elements == 0,
               "gguf_tensor_bytes: {} values per row is not a multiple of {}'s {}", cols,
               ggml_type_name(type), b->elements);
  return shape.numel() / b->elements * b->bytes;
}

void write_gguf(const std::filesystem::path& file,
                const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorOut>& tensors,
                const std::function<void(size_t, uint8_t*)>& fill) {
  Out o(file);
  o.bytes("GGUF", 4);
  o.pod<uint32_t>(3);
  o.pod<uint64_t>(tensors.size());
  o.pod<uint64_t>(metadata.size());
  for (const auto& [key, v] : metadata) {
    o.string(key);
    o.pod(static_cast<uint32_t>(v.type));
    value(o, key, v);
  }
  std::vector<int64_t> sizes;
  uint64_t offset = 0;
  for (const GgufTensorOut& t : tensors) {
    sizes.push_back(gguf_tensor_bytes(t.type, t.shape));
    o.string(t.name);
    o.pod(static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) o.pod(static_cast<uint64_t>(t.shape[d]));
    o.pod(static_cast<uint32_t>(t.type));
    o.pod<uint64_t>(offset);
    offset = align_up(offset + static_cast<uint64_t>(sizes.back()));
  }
  o.pad();
  std::vector<uint8_t> data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    data.assign(static_cast<size_t>(sizes[i]), 0);
    fill(i, data.data());
    o.bytes(data.data(), data.size());
    o.pad();
  }
  o.close();
}

}  // namespace dspark
