#include "dspark/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/io/json_util.h"
#include "dspark/io/mapped_file.h"

namespace dspark {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kE4m3Name = "F8_E4M3";
constexpr const char* kSupportedDtypes = "F32, BF16, F16, I32, U32, I64, I8, U8, BOOL, F8_E4M3";

// Safetensors dtype names -> DType; nullopt for names dspark does not load.
std::optional<DType> safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::f32;
  if (name == "BF16") return DType::bf16;
  if (name == "F16") return DType::f16;
  if (name == "I32") return DType::i32;
  // U32 has the bits of i32: MLX's packed quantized weights (io/mlx_quant.h).
  if (name == "U32") return DType::i32;
  if (name == "I64") return DType::i64;
  if (name == "I8") return DType::i8;
  if (name == "U8" || name == "BOOL") return DType::u8;  // BOOL is one byte, 0 or 1
  // E4M3 codes (core/fp8.h) as bytes: FP8 checkpoints' weights (io/fp8_quant.h).
  if (name == kE4m3Name) return DType::u8;
  return std::nullopt;
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::i8:
      return "I8";
    case DType::u8:
      return "U8";
  }
  DSPARK_FAIL(internal, "bad dtype {}", static_cast<int>(dtype));
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads a non-negative JSON integer that must fit in uint64.
uint64_t unsigned_value(const nlohmann::json& v, const std::string& file, const std::string& name,
                        const char* what) {
  DSPARK_CHECK_KIND(io, v.is_number_unsigned(), "{}: tensor '{}': {} must be non-negative integers",
                    file, name, what);
  return v.get<uint64_t>();
}

// The parsed header of one file: tensors with absolute offsets in the file.
struct ParsedTensor {
  DType dtype = DType::f32;
  Shape shape;
  size_t offset = 0;
  size_t bytes = 0;
  bool e4m3 = false;
};
struct ParsedHeader {
  std::map<std::string, ParsedTensor> tensors;
  std::map<std::string, std::string> metadata;
};

ParsedHeader parse_header(const MappedFile& mapped) {
  const std::string file = mapped.path().string();
  const size_t file_size = mapped.size();
  DSPARK_CHECK_KIND(io, file_size >= 8,
                    "{}: file is {} bytes, shorter than the 8-byte safetensors header length", file,
                    file_size);
  const uint64_t header_len = read_u64_le(mapped.data());
  DSPARK_CHECK_KIND(io, header_len <= file_size - 8,
                    "{}: header length {} exceeds the file size {} (truncated or not safetensors)",
                    file, header_len, file_size);
  const std::string_view text(reinterpret_cast<const char*>(mapped.data()) + 8, header_len);
  const nlohmann::json header = parse_json_text(text, file + ": header");
  DSPARK_CHECK_KIND(io, header.is_object(), "{}: header is not a JSON object", file);

  const size_t data_begin = 8 + header_len;
  const size_t data_size = file_size - data_begin;
  ParsedHeader parsed;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      DSPARK_CHECK_KIND(io, info.is_object(), "{}: __metadata__ is not a JSON object", file);
      for (const auto& [key, value] : info.items())
        parsed.metadata[key] = value.is_string() ? value.get<std::string>() : value.dump();
      continue;
    }
    DSPARK_CHECK_KIND(io, info.is_object(), "{}: tensor '{}': entry is not a JSON object", file,
                      name);
    const auto dtype_it = info.find("dtype");
    const auto shape_it = info.find("shape");
    const auto offsets_it = info.find("data_offsets");
    DSPARK_CHECK_KIND(io, dtype_it != info.end() && dtype_it->is_string(),
                      "{}: tensor '{}': missing or non-string 'dtype'", file, name);
    DSPARK_CHECK_KIND(io, shape_it != info.end() && shape_it->is_array(),
                      "{}: tensor '{}': missing or non-array 'shape'", file, name);
    DSPARK_CHECK_KIND(io,
                      offsets_it != info.end() && offsets_it->is_array() && offsets_it->size() == 2,
                      "{}: tensor '{}': 'data_offsets' must be [begin, end]", file, name);
    const std::string dtype_name_st = dtype_it->get<std::string>();
    const std::optional<DType> dtype = safetensors_dtype(dtype_name_st);
    DSPARK_CHECK_KIND(unsupported, dtype.has_value(),
                      "{}: tensor '{}' has unsupported dtype {} (supported: {})", file, name,
                      dtype_name_st, kSupportedDtypes);
    DSPARK_CHECK_KIND(io, shape_it->size() <= static_cast<size_t>(kMaxDims),
                      "{}: tensor '{}': rank {} exceeds {}", file, name, shape_it->size(),
                      kMaxDims);
    Shape shape;
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : *shape_it) {
      const uint64_t dim = unsigned_value(d, file, name, "shape dimensions");
      overflow = overflow || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (!overflow && dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / dim)
        overflow = true;
      numel *= dim;
      shape.push_back(static_cast<int64_t>(dim));
    }
    DSPARK_CHECK_KIND(io, !overflow, "{}: tensor '{}': shape {} is too large", file, name,
                      shape_it->dump());
    const uint64_t begin = unsigned_value((*offsets_it)[0], file, name, "data_offsets");
    const uint64_t end = unsigned_value((*offsets_it)[1], file, name, "data_offsets");
    DSPARK_CHECK_KIND(io, begin <= end, "{}: tensor '{}': data_offsets [{}, {}] are reversed", file,
                      name, begin, end);
    const uint64_t expected = numel * dtype_size(*dtype);
    DSPARK_CHECK_KIND(io, end - begin == expected,
                      "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but {} {} needs {}",
                      file, name, begin, end, end - begin, dtype_name_st, shape.str(), expected);
    DSPARK_CHECK_KIND(io, end <= data_size,
                      "{}: tensor '{}': data_offsets [{}, {}] exceed the {}-byte data section "
                      "(file truncated?)",
                      file, name, begin, end, data_size);
    parsed.tensors[name] = ParsedTensor{*dtype, shape, static_cast<size_t>(data_begin + begin),
                                        static_cast<size_t>(expected), dtype_name_st == kE4m3Name};
  }
  return parsed;
}

// The shard files of a sharded checkpoint, and which file each tensor is said to live in.
struct ShardIndex {
  std::vector<std::string> files;                 // in first-appearance order, unique
  std::map<std::string, std::string> weight_map;  // tensor -> file name
};

ShardIndex read_index(const fs::path& index_file) {
  const nlohmann::json index = read_json_file(index_file);
  const std::string source = index_file.string();
  DSPARK_CHECK_KIND(io, index.is_object(), "{}: expected a JSON object", source);
  const auto it = index.find("weight_map");
  DSPARK_CHECK_KIND(io, it != index.end() && it->is_object(),
                    "{}: missing or non-object 'weight_map'", source);
  ShardIndex shards;
  std::set<std::string> seen;
  for (const auto& [tensor, file] : it->items()) {
    DSPARK_CHECK_KIND(io, file.is_string(), "{}: weight_map['{}'] is not a file name", source,
                      tensor);
    const std::string name = file.get<std::string>();
    DSPARK_CHECK_KIND(io, !name.empty() && fs::path(name).filename() == fs::path(name),
                      "{}: weight_map['{}'] = '{}' is not a plain file name", source, tensor, name);
    shards.weight_map[tensor] = name;
    if (seen.insert(name).second) shards.files.push_back(name);
  }
  DSPARK_CHECK_KIND(io, !shards.files.empty(), "{}: empty weight_map", source);
  std::sort(shards.files.begin(), shards.files.end());
  return shards;
}

// The single-file checkpoint of a directory without an index.
fs::path single_file_in(const fs::path& dir) {
  if (fs::is_regular_file(dir / kSingleName)) return dir / kSingleName;
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
      found.push_back(entry.path());
  DSPARK_CHECK_KIND(io, !found.empty(), "{}: no {} or *.safetensors file in the directory",
                    dir.string(), kIndexName);
  DSPARK_CHECK_KIND(io, found.size() == 1,
                    "{}: {} .safetensors files but no {} to say how they fit together",
                    dir.string(), found.size(), kIndexName);
  return found.front();
}

}  // namespace

SafeTensors::SafeTensors() = default;
SafeTensors::SafeTensors(SafeTensors&&) noexcept = default;
SafeTensors& SafeTensors::operator=(SafeTensors&&) noexcept = default;
SafeTensors::~SafeTensors() = default;

SafeTensors SafeTensors::open(const fs::path& path) {
  std::error_code ec;
  DSPARK_CHECK_KIND(io, fs::exists(path, ec), "{}: no such file or directory", path.string());
  SafeTensors st;
  st.path_ = path;

  std::vector<fs::path> files;
  ShardIndex index;
  const bool sharded = fs::is_directory(path) && fs::is_regular_file(path / kIndexName);
  if (sharded) {
    index = read_index(path / kIndexName);
    for (const std::string& f : index.files) files.push_back(path / f);
  } else if (fs::is_directory(path)) {
    files.push_back(single_file_in(path));
  } else {
    files.push_back(path);
  }

  for (size_t i = 0; i < files.size(); ++i) {
    st.files_.push_back(std::make_unique<MappedFile>(files[i]));
    ParsedHeader header = parse_header(*st.files_.back());
    if (i == 0) st.metadata_ = std::move(header.metadata);
    for (auto& [name, t] : header.tensors) {
      if (sharded) {
        // The index is authoritative: a tensor the index does not list (or places in another
        // shard) is a sign of a mismatched set of files.
        const auto it = index.weight_map.find(name);
        DSPARK_CHECK_KIND(io, it != index.weight_map.end(), "{}: tensor '{}' is not listed in {}",
                          files[i].string(), name, kIndexName);
        DSPARK_CHECK_KIND(io, it->second == files[i].filename().string(),
                          "{}: tensor '{}' is listed in {} under shard '{}'", files[i].string(),
                          name, kIndexName, it->second);
      }
      const bool inserted = st.entries_
                                .emplace(name, Entry{static_cast<int>(i), t.dtype, t.shape,
                                                     t.offset, t.bytes, t.e4m3})
                                .second;
      DSPARK_CHECK_KIND(io, inserted, "{}: tensor '{}' appears in more than one shard",
                        files[i].string(), name);
    }
  }
  if (sharded) {
    for (const auto& [name, file] : index.weight_map)
      DSPARK_CHECK_KIND(io, st.entries_.count(name) == 1,
                        "{}: tensor '{}' listed in {} is missing from shard '{}'", path.string(),
                        name, kIndexName, file);
  }
  return st;
}

bool SafeTensors::contains(const std::string& name) const {
  return entries_.count(name) == 1;
}

Tensor SafeTensors::get(const std::string& name) const {
  const auto it = entries_.find(name);
  DSPARK_CHECK_KIND(io, it != entries_.end(), "tensor '{}' not found in {}", name, path_.string());
  const Entry& e = it->second;
  const uint8_t* base = files_[e.file]->data();
  // A zero-byte tensor may sit at the very end of the file (or in an empty data section).
  void* data = base == nullptr ? nullptr : const_cast<uint8_t*>(base + e.offset);
  return Tensor(data, e.dtype, e.shape, Device::cpu());
}

bool SafeTensors::is_e4m3(const std::string& name) const {
  const auto it = entries_.find(name);
  return it != entries_.end() && it->second.e4m3;
}

size_t SafeTensors::bytes(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? 0 : it->second.bytes;
}

size_t SafeTensors::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, e] : entries_) total += e.bytes;
  return total;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

void write_safetensors(const fs::path& file,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::set<std::string>& as_u32) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DSPARK_CHECK(name != kMetadataKey, "write_safetensors: '{}' is a reserved name", name);
    DSPARK_CHECK(!header.contains(name), "write_safetensors: duplicate tensor '{}'", name);
    DSPARK_CHECK(t.device().is_cpu() && t.is_contiguous(),
                 "write_safetensors: tensor '{}' must be contiguous on the CPU, got {}", name,
                 t.describe());
    nlohmann::json shape = nlohmann::json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    const bool u32 = as_u32.count(name) != 0;
    DSPARK_CHECK(!u32 || t.dtype() == DType::i32, "write_safetensors: '{}' is {}, not i32 (U32)",
                 name, dtype_name(t.dtype()));
    header[name] = {{"dtype", u32 ? "U32" : safetensors_dtype_name(t.dtype())},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (as the reference writer does).
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  DSPARK_CHECK_KIND(io, out.good(), "{}: cannot open for writing", file.string());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors)
    if (t.nbytes() > 0)
      out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  out.close();
  DSPARK_CHECK_KIND(io, !out.fail(), "{}: write failed", file.string());
}

}  // namespace dspark
