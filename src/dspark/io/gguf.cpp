// GGUF parsing: header, metadata, tensor directory (see gguf.h for the layout).
#include "dspark/io/gguf.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <span>

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/io/mapped_file.h"

namespace dspark {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr size_t kDefaultAlignment = 32;
constexpr int kGgufMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxArrayNesting = 8;

// Bounds-checked little-endian reader over the mapping; every failure names the file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::filesystem::path& path)
      : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }

  void need(size_t n, const char* what) const {
    DSPARK_CHECK_KIND(io, n <= size_ - pos_,
                      "{}: truncated GGUF file: {} needs {} bytes at offset {}, but the file has "
                      "{} bytes",
                      path_.string(), what, n, pos_, size_);
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const auto n = read<uint64_t>(what);
    DSPARK_CHECK_KIND(io, n <= size_ - pos_,
                      "{}: truncated GGUF file: {} of {} bytes at offset {} runs past the end "
                      "({} bytes)",
                      path_.string(), what, n, pos_, size_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::filesystem::path& path_;
};

size_t scalar_size(GgufValue::Type t) {
  using T = GgufValue::Type;
  switch (t) {
    case T::u8:
    case T::i8:
    case T::boolean:
      return 1;
    case T::u16:
    case T::i16:
      return 2;
    case T::u32:
    case T::i32:
    case T::f32:
      return 4;
    case T::u64:
    case T::i64:
    case T::f64:
      return 8;
    default:
      return 0;
  }
}

bool is_valid_type(uint32_t t) {
  return t <= 12;
}

GgufValue read_value(Cursor& c, GgufValue::Type type, const std::string& key,
                     const std::filesystem::path& path, uint64_t depth);

// One scalar (not string, not array) as a widened value.
template <typename Out>
Out read_scalar_as(Cursor& c, GgufValue::Type t) {
  using T = GgufValue::Type;
  switch (t) {
    case T::u8:
      return static_cast<Out>(c.read<uint8_t>("a u8 value"));
    case T::i8:
      return static_cast<Out>(c.read<int8_t>("an i8 value"));
    case T::u16:
      return static_cast<Out>(c.read<uint16_t>("a u16 value"));
    case T::i16:
      return static_cast<Out>(c.read<int16_t>("an i16 value"));
    case T::u32:
      return static_cast<Out>(c.read<uint32_t>("a u32 value"));
    case T::i32:
      return static_cast<Out>(c.read<int32_t>("an i32 value"));
    case T::u64:
      return static_cast<Out>(c.read<uint64_t>("a u64 value"));
    case T::i64:
      return static_cast<Out>(c.read<int64_t>("an i64 value"));
    case T::f32:
      return static_cast<Out>(c.read<float>("an f32 value"));
    case T::f64:
      return static_cast<Out>(c.read<double>("an f64 value"));
    default:
      break;
  }
  DSPARK_FAIL(internal, "read_scalar_as: bad type {}", static_cast<uint32_t>(t));
}

GgufValue read_array(Cursor& c, const std::string& key, const std::filesystem::path& path,
                     uint64_t depth) {
  using T = GgufValue::Type;
  GgufValue v;
  v.type = T::array;
  const auto et = c.read<uint32_t>("an array element type");
  DSPARK_CHECK_KIND(io, is_valid_type(et), "{}: metadata '{}': bad array element type {}",
                    path.string(), key, et);
  v.element_type = static_cast<T>(et);
  const auto n = c.read<uint64_t>("an array length");
  // Each element takes at least one byte (strings 8): reject lengths the file cannot hold before
  // reserving memory for them.
  const size_t min_size =
      v.element_type == T::string ? 8 : std::max<size_t>(1, scalar_size(v.element_type));
  DSPARK_CHECK_KIND(io, n <= std::numeric_limits<size_t>::max() / min_size,
                    "{}: metadata '{}': array length {} is too large", path.string(), key, n);
  c.need(static_cast<size_t>(n) * min_size, "array elements");
  switch (v.element_type) {
    case T::string: {
      std::vector<std::string> items(static_cast<size_t>(n));
      for (auto& s : items) s = c.read_string("an array string");
      v.value = std::move(items);
      break;
    }
    case T::array: {
      DSPARK_CHECK_KIND(io, depth < kMaxArrayNesting, "{}: metadata '{}': arrays nested too deep",
                        path.string(), key);
      std::vector<GgufValue> items;
      items.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i)
        items.push_back(read_value(c, T::array, key, path, depth + 1));
      v.value = std::move(items);
      break;
    }
    case T::boolean: {
      std::vector<int64_t> items(static_cast<size_t>(n));
      for (auto& x : items) x = c.read<uint8_t>("a bool") != 0;
      v.value = std::move(items);
      break;
    }
    case T::u64: {
      std::vector<uint64_t> items(static_cast<size_t>(n));
      for (auto& x : items) x = c.read<uint64_t>("a u64 value");
      v.value = std::move(items);
      break;
    }
    case T::f32:
    case T::f64: {
      std::vector<double> items(static_cast<size_t>(n));
      for (auto& x : items) x = read_scalar_as<double>(c, v.element_type);
      v.value = std::move(items);
      break;
    }
    default: {
      std::vector<int64_t> items(static_cast<size_t>(n));
      for (auto& x : items) x = read_scalar_as<int64_t>(c, v.element_type);
      v.value = std::move(items);
      break;
    }
  }
  return v;
}

GgufValue read_value(Cursor& c, GgufValue::Type type, const std::string& key,
                     const std::filesystem::path& path, uint64_t depth) {
  using T = GgufValue::Type;
  GgufValue v;
  v.type = type;
  switch (type) {
    case T::string:
      v.value = c.read_string("a string value");
      break;
    case T::array:
      return read_array(c, key, path, depth);
    case T::boolean:
      v.value = c.read<uint8_t>("a bool value") != 0;
      break;
    case T::u64:
      v.value = c.read<uint64_t>("a u64 value");
      break;
    case T::f32:
    case T::f64:
      v.value = read_scalar_as<double>(c, type);
      break;
    default:
      v.value = read_scalar_as<int64_t>(c, type);
      break;
  }
  return v;
}

[[noreturn]] void wrong_type(const std::string& key, const GgufValue& v, const char* wanted) {
  DSPARK_FAIL(io, "GGUF metadata '{}' is {}{}, expected {}", key, gguf_value_type_name(v.type),
              v.is_array() ? fmt::format(" of {}", gguf_value_type_name(v.element_type)) : "",
              wanted);
}

}  // namespace

// ---- types ------------------------------------------------------------------------------------

std::string gguf_value_type_name(GgufValue::Type type) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : fmt::format("type#{}", i);
}

std::optional<GgmlBlock> ggml_block(GgmlType type) {
  using G = GgmlType;
  switch (type) {
    case G::f32:
    case G::i32:
      return GgmlBlock{1, 4};
    case G::f16:
    case G::bf16:
    case G::i16:
      return GgmlBlock{1, 2};
    case G::i8:
      return GgmlBlock{1, 1};
    case G::i64:
    case G::f64:
      return GgmlBlock{1, 8};
    case G::q4_0:
      return GgmlBlock{32, 18};
    case G::q4_1:
      return GgmlBlock{32, 20};
    case G::q5_0:
      return GgmlBlock{32, 22};
    case G::q5_1:
      return GgmlBlock{32, 24};
    case G::q8_0:
      return GgmlBlock{32, 34};
    case G::q8_1:
      return GgmlBlock{32, 40};
    case G::q2_k:
      return GgmlBlock{256, 84};
    case G::q3_k:
      return GgmlBlock{256, 110};
    case G::q4_k:
      return GgmlBlock{256, 144};
    case G::q5_k:
      return GgmlBlock{256, 176};
    case G::q6_k:
      return GgmlBlock{256, 210};
    case G::q8_k:
      return GgmlBlock{256, 292};
    case G::iq2_xxs:
      return GgmlBlock{256, 66};
    case G::iq2_xs:
      return GgmlBlock{256, 74};
    case G::iq3_xxs:
      return GgmlBlock{256, 98};
    case G::iq1_s:
      return GgmlBlock{256, 50};
    case G::iq4_nl:
      return GgmlBlock{32, 18};
    case G::iq3_s:
      return GgmlBlock{256, 110};
    case G::iq2_s:
      return GgmlBlock{256, 82};
    case G::iq4_xs:
      return GgmlBlock{256, 136};
    case G::iq1_m:
      return GgmlBlock{256, 56};
    case G::tq1_0:
      return GgmlBlock{256, 54};
    case G::tq2_0:
      return GgmlBlock{256, 66};
    case G::mxfp4:
      return GgmlBlock{32, 17};
  }
  return std::nullopt;
}

std::string ggml_type_name(GgmlType type) {
  using G = GgmlType;
  switch (type) {
    case G::f32:
      return "F32";
    case G::f16:
      return "F16";
    case G::q4_0:
      return "Q4_0";
    case G::q4_1:
      return "Q4_1";
    case G::q5_0:
      return "Q5_0";
    case G::q5_1:
      return "Q5_1";
    case G::q8_0:
      return "Q8_0";
    case G::q8_1:
      return "Q8_1";
    case G::q2_k:
      return "Q2_K";
    case G::q3_k:
      return "Q3_K";
    case G::q4_k:
      return "Q4_K";
    case G::q5_k:
      return "Q5_K";
    case G::q6_k:
      return "Q6_K";
    case G::q8_k:
      return "Q8_K";
    case G::iq2_xxs:
      return "IQ2_XXS";
    case G::iq2_xs:
      return "IQ2_XS";
    case G::iq3_xxs:
      return "IQ3_XXS";
    case G::iq1_s:
      return "IQ1_S";
    case G::iq4_nl:
      return "IQ4_NL";
    case G::iq3_s:
      return "IQ3_S";
    case G::iq2_s:
      return "IQ2_S";
    case G::iq4_xs:
      return "IQ4_XS";
    case G::i8:
      return "I8";
    case G::i16:
      return "I16";
    case G::i32:
      return "I32";
    case G::i64:
      return "I64";
    case G::f64:
      return "F64";
    case G::iq1_m:
      return "IQ1_M";
    case G::bf16:
      return "BF16";
    case G::tq1_0:
      return "TQ1_0";
    case G::tq2_0:
      return "TQ2_0";
    case G::mxfp4:
      return "MXFP4";
  }
  return fmt::format("type#{}", static_cast<uint32_t>(type));
}

// ---- values -----------------------------------------------------------------------------------

size_t GgufValue::array_size() const {
  return std::visit(
      [](const auto& x) -> size_t {
        if constexpr (requires { x.size(); } &&
                      !std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
          return x.size();
        } else {
          return 0;
        }
      },
      value);
}

int64_t GgufValue::as_int(const std::string& key) const {
  if (const auto* i = std::get_if<int64_t>(&value); i != nullptr && type != Type::boolean)
    return *i;
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    DSPARK_CHECK_KIND(io, *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                      "GGUF metadata '{}' = {} does not fit a signed 64-bit integer", key, *u);
    return static_cast<int64_t>(*u);
  }
  wrong_type(key, *this, "an integer");
}

double GgufValue::as_double(const std::string& key) const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  return static_cast<double>(as_int(key));
}

bool GgufValue::as_bool(const std::string& key) const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  wrong_type(key, *this, "a bool");
}

const std::string& GgufValue::as_string(const std::string& key) const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  wrong_type(key, *this, "a string");
}

const std::vector<std::string>& GgufValue::as_strings(const std::string& key) const {
  if (const auto* s = std::get_if<std::vector<std::string>>(&value)) return *s;
  wrong_type(key, *this, "an array of strings");
}

std::vector<int64_t> GgufValue::as_ints(const std::string& key) const {
  if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) return *v;
  if (const auto* u = std::get_if<std::vector<uint64_t>>(&value)) {
    std::vector<int64_t> out;
    out.reserve(u->size());
    for (uint64_t x : *u) {
      DSPARK_CHECK_KIND(io, x <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                        "GGUF metadata '{}': element {} does not fit int64", key, x);
      out.push_back(static_cast<int64_t>(x));
    }
    return out;
  }
  wrong_type(key, *this, "an array of integers");
}

std::vector<double> GgufValue::as_doubles(const std::string& key) const {
  if (const auto* v = std::get_if<std::vector<double>>(&value)) return *v;
  const std::vector<int64_t> ints = as_ints(key);
  return std::vector<double>(ints.begin(), ints.end());
}

// ---- file -------------------------------------------------------------------------------------

GgufFile::GgufFile() = default;
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path& file) {
  GgufFile g;
  g.path_ = file;
  g.file_ = std::make_unique<MappedFile>(file);
  const std::string where = file.string();
  Cursor c(g.file_->data(), g.file_->size(), g.path_);

  const auto magic = c.read<uint32_t>("the magic");
  DSPARK_CHECK_KIND(io, magic == kMagic, "{}: not a GGUF file (bad magic 0x{:08x})", where, magic);
  g.version_ = c.read<uint32_t>("the version");
  if (g.version_ != 2 && g.version_ != 3) {
    // A big-endian file stores the version byte-swapped (e.g. 0x03000000).
    const bool swapped = (g.version_ & 0xffffu) == 0 && (g.version_ >> 24) != 0;
    DSPARK_FAIL(unsupported,
                "{}: GGUF version {} is not supported (dspark reads versions 2 and 3{})", where,
                g.version_, swapped ? "; this looks like a big-endian file" : "");
  }
  const auto n_tensors = c.read<uint64_t>("the tensor count");
  const auto n_kv = c.read<uint64_t>("the metadata count");
  // Every entry takes more than 8 bytes: counts the file cannot hold are corrupt.
  DSPARK_CHECK_KIND(io, n_tensors <= g.file_->size() / 8 && n_kv <= g.file_->size() / 8,
                    "{}: corrupt GGUF header: {} tensors and {} metadata entries in a {}-byte file",
                    where, n_tensors, n_kv, g.file_->size());

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("a metadata key");
    const auto type = c.read<uint32_t>("a metadata value type");
    DSPARK_CHECK_KIND(io, is_valid_type(type), "{}: metadata '{}' has an invalid value type {}",
                      where, key, type);
    GgufValue v = read_value(c, static_cast<GgufValue::Type>(type), key, g.path_, 0);
    DSPARK_CHECK_KIND(io, g.metadata_.count(key) == 0, "{}: duplicate metadata key '{}'", where,
                      key);
    g.metadata_.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    const int64_t alignment = a->as_int("general.alignment");
    DSPARK_CHECK_KIND(io, alignment > 0 && (alignment & (alignment - 1)) == 0,
                      "{}: general.alignment = {} is not a positive power of two", where,
                      alignment);
    g.alignment_ = static_cast<size_t>(alignment);
  } else {
    g.alignment_ = kDefaultAlignment;
  }

  std::vector<std::pair<uint64_t, size_t>> relative;  // (offset from the data start, index)
  g.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.read_string("a tensor name");
    const auto n_dims = c.read<uint32_t>("a tensor rank");
    DSPARK_CHECK_KIND(io, n_dims >= 1 && n_dims <= kGgufMaxDims, "{}: tensor '{}' has {} dims",
                      where, t.name, n_dims);
    std::vector<int64_t> dims(n_dims);
    int64_t numel = 1;
    for (auto& d : dims) {
      const auto v = c.read<uint64_t>("a tensor dim");
      DSPARK_CHECK_KIND(io, v > 0 && v <= (uint64_t{1} << 40), "{}: tensor '{}' has a bad dim {}",
                        where, t.name, v);
      d = static_cast<int64_t>(v);
      DSPARK_CHECK_KIND(io, numel <= (int64_t{1} << 50) / d,
                        "{}: tensor '{}': element count overflows", where, t.name);
      numel *= d;
    }
    const auto type = c.read<uint32_t>("a tensor type");
    t.type = static_cast<GgmlType>(type);
    const std::optional<GgmlBlock> block = ggml_block(t.type);
    DSPARK_CHECK_KIND(unsupported, block.has_value(), "{}: tensor '{}' has unknown ggml type id {}",
                      where, t.name, type);
    DSPARK_CHECK_KIND(io, dims[0] % block->elements == 0,
                      "{}: tensor '{}': row length {} is not a multiple of the {} block size {}",
                      where, t.name, dims[0], ggml_type_name(t.type), block->elements);
    t.numel = numel;
    t.bytes = static_cast<size_t>(numel / block->elements * block->bytes);
    std::reverse(dims.begin(), dims.end());
    t.shape = Shape(std::span<const int64_t>(dims));
    const auto offset = c.read<uint64_t>("a tensor offset");
    DSPARK_CHECK_KIND(io, offset % g.alignment_ == 0,
                      "{}: tensor '{}' offset {} is not aligned to {}", where, t.name, offset,
                      g.alignment_);
    DSPARK_CHECK_KIND(io, g.index_.count(t.name) == 0, "{}: duplicate tensor '{}'", where, t.name);
    g.index_.emplace(t.name, g.tensors_.size());
    relative.emplace_back(offset, g.tensors_.size());
    g.tensors_.push_back(std::move(t));
  }
  // The data area starts at the next multiple of the alignment.
  const size_t data_start = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  const size_t size = g.file_->size();
  for (const auto& [offset, i] : relative) {
    GgufTensorInfo& t = g.tensors_[i];
    DSPARK_CHECK_KIND(
        io,
        data_start <= size && offset <= size - data_start && t.bytes <= size - data_start - offset,
        "{}: truncated GGUF file: tensor '{}' ({} bytes at data offset {}) ends "
        "past the end of the file ({} bytes, data starts at {})",
        where, t.name, t.bytes, offset, size, data_start);
    t.offset = data_start + static_cast<size_t>(offset);
  }
  // Overlapping tensors mean a corrupt directory.
  std::sort(relative.begin(), relative.end());
  for (size_t k = 1; k < relative.size(); ++k) {
    const GgufTensorInfo& prev = g.tensors_[relative[k - 1].second];
    const GgufTensorInfo& cur = g.tensors_[relative[k].second];
    DSPARK_CHECK_KIND(io, prev.offset + prev.bytes <= cur.offset,
                      "{}: tensors '{}' and '{}' overlap", where, prev.name, cur.name);
  }
  return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  DSPARK_CHECK_KIND(io, v != nullptr, "{}: missing metadata key '{}'", path_.string(), key);
  return *v;
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  const GgufValue* v = find(key);
  return v == nullptr ? std::nullopt : std::optional<int64_t>(v->as_int(key));
}
std::optional<double> GgufFile::find_double(const std::string& key) const {
  const GgufValue* v = find(key);
  return v == nullptr ? std::nullopt : std::optional<double>(v->as_double(key));
}
std::optional<bool> GgufFile::find_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  return v == nullptr ? std::nullopt : std::optional<bool>(v->as_bool(key));
}
std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  const GgufValue* v = find(key);
  return v == nullptr ? std::nullopt : std::optional<std::string>(v->as_string(key));
}

size_t GgufFile::tensor_bytes() const {
  size_t total = 0;
  for (const GgufTensorInfo& t : tensors_) total += t.bytes;
  return total;
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  DSPARK_CHECK_KIND(io, it != index_.end(), "tensor '{}' not found in {}", name, path_.string());
  return tensors_[it->second];
}

const uint8_t* GgufFile::data(const GgufTensorInfo& info) const {
  return file_->data() + info.offset;
}

std::vector<float> GgufFile::dequantize(const std::string& name) const {
  const GgufTensorInfo& t = tensor(name);
  std::vector<float> out(static_cast<size_t>(t.numel));
  dequantize_to_f32(t.type, data(t), t.numel, out.data(),
                    fmt::format("{}: tensor '{}'", path_.string(), name));
  return out;
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".gguf";
}

}  // namespace dspark
