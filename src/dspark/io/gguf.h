// Read-only access to GGUF files (llama.cpp's single-file model format, versions 2 and 3) through
// mmap: the header, every metadata key/value (all value types, arrays included), the tensor
// directory, and tensor data dequantized to f32.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv entries of
// (string key, u32 value type, value); n_tensors entries of (string name, u32 n_dims,
// u64 dims[n_dims] innermost first, u32 ggml type, u64 offset); padding to `general.alignment`
// (default 32); the tensor data, each tensor at data_start + offset. Strings are u64 length +
// bytes (no terminator). Tensor shapes are reported row-major (outermost first), i.e. the GGUF
// dims reversed, so a [out, in] weight stored with ne = {in, out} reads as Shape{out, in}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dspark/core/quant.h"
#include "dspark/core/tensor.h"

namespace dspark {

class MappedFile;

// ggml tensor types (the numeric values are the file format's).
enum class GgmlType : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

// "Q4_K", "F32", ... ("type#N" for an id we do not know).
std::string ggml_type_name(GgmlType type);
// Elements per block and bytes per block; nullopt for an unknown type id.
struct GgmlBlock {
  int64_t elements;
  int64_t bytes;
};
std::optional<GgmlBlock> ggml_block(GgmlType type);
// The block format of a quantized type (core/quant.h), or nullopt (a float type, or one dspark
// does not implement).
std::optional<QuantType> quant_type_of(GgmlType type);
// The ggml type of a block format (the inverse of quant_type_of).
GgmlType ggml_type_of(QuantType type);
// True for the types dequantize_to_f32 implements: F32, F16, BF16 and every quant_type_of type.
bool ggml_type_dequantizable(GgmlType type);

// Dequantizes `n` elements (a multiple of the type's block size) of `type` at `src` into `dst`.
// Throws ErrorKind::unsupported for other types, naming `what` (e.g. the tensor) and the type.
void dequantize_to_f32(GgmlType type, const uint8_t* src, int64_t n, float* dst,
                       const std::string& what);

// One metadata value. Arrays hold a vector of scalars or strings of one element type (nested
// arrays are kept as a list of GgufValue).
struct GgufValue {
  enum class Type : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
  };
  Type type = Type::u8;
  Type element_type = Type::u8;  // arrays only
  // Scalars: integers as int64/uint64, floats as double, bool as bool, strings as string.
  // Arrays: one of the vectors (integers widen to int64 except u64; floats to double).
  std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<int64_t>,
               std::vector<uint64_t>, std::vector<double>, std::vector<std::string>,
               std::vector<GgufValue>>
      value;

  bool is_array() const { return type == Type::array; }
  size_t array_size() const;
  // Conversions; each throws ErrorKind::io naming `key` when the value has another type.
  int64_t as_int(const std::string& key) const;    // any integer type (u64 must fit int64)
  double as_double(const std::string& key) const;  // any integer or float type
  bool as_bool(const std::string& key) const;
  const std::string& as_string(const std::string& key) const;
  const std::vector<std::string>& as_strings(const std::string& key) const;
  std::vector<int64_t> as_ints(const std::string& key) const;    // integer arrays
  std::vector<double> as_doubles(const std::string& key) const;  // integer or float arrays
};

std::string gguf_value_type_name(GgufValue::Type type);

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  Shape shape;  // row-major (GGUF dims reversed)
  int64_t numel = 0;
  size_t offset = 0;  // absolute offset of the data in the file
  size_t bytes = 0;
};

class GgufFile {
 public:
  // Maps and parses `file`. Throws ErrorKind::io "<file>: <problem>" for a missing, truncated or
  // malformed file (bad magic, counts or strings past the end, a tensor outside the data area,
  // duplicate names, dims whose product overflows or does not fill whole blocks) and
  // ErrorKind::unsupported for a version other than 2/3, a big-endian file, or a tensor whose
  // type id is unknown (naming the tensor).
  static GgufFile open(const std::filesystem::path& file);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::filesystem::path& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  // ---- metadata ----
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  // Throws ErrorKind::io "<file>: missing metadata key '<key>'" when absent.
  const GgufValue& get(const std::string& key) const;
  const GgufValue* find(const std::string& key) const;
  std::string get_string(const std::string& key) const { return get(key).as_string(key); }
  int64_t get_int(const std::string& key) const { return get(key).as_int(key); }
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_double(const std::string& key) const;
  std::optional<bool> find_bool(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // file order
  size_t tensor_bytes() const;                                             // of every tensor's data
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws ErrorKind::io "tensor '<name>' not found in <file>".
  const GgufTensorInfo& tensor(const std::string& name) const;
  // The raw bytes of a tensor in the mapping.
  const uint8_t* data(const GgufTensorInfo& info) const;
  // A tensor dequantized to f32 (row-major `info.shape`); unsupported types throw
  // ErrorKind::unsupported "<file>: tensor '<name>' has type <T>, which dspark cannot
  // dequantize (supported: ...)".
  std::vector<float> dequantize(const std::string& name) const;

 private:
  GgufFile();
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
};

// The tokenizer stored in tokenizer.ggml.* as the equivalent Hugging Face tokenizer.json text
// (io/tokenizer_gguf.cpp; Tokenizer::from_gguf loads it), with the BOS / EOS ids (-1: none).
// Throws ErrorKind::unsupported for a tokenizer.ggml.model other than gpt2 / llama or an unknown
// tokenizer.ggml.pre, ErrorKind::io for inconsistent arrays.
struct GgufTokenizerSpec {
  std::string json;
  int32_t bos = -1;
  int32_t eos = -1;
};
GgufTokenizerSpec gguf_tokenizer_json(const GgufFile& file);

// The inverse, for writing a GGUF file: the tokenizer.ggml.* metadata of the byte-level BPE
// tokenizer.json in `dir` ("gpt2" model; tokenizer.ggml.pre the name under which
// gguf_tokenizer_json rebuilds its pre-tokenizer exactly; the tokens by id, padded with unused
// "[PAD<id>]" tokens up to `vocab_size`; added tokens as CONTROL when special, else
// USER_DEFINED; the merges; the BOS id and add_bos_token as encoding with special tokens adds
// it; tokenizer.chat_template from tokenizer_config.json when it has one). Throws
// ErrorKind::unsupported for another tokenizer model or a pre-tokenizer with no GGUF name.
std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(
    const std::filesystem::path& dir, int vocab_size);

// tokenizer.chat_template ("" when absent); render it with ChatTemplate::from_string.
std::string gguf_chat_template(const GgufFile& file);

// True when `path` names a .gguf file (by extension, case-insensitive).
bool is_gguf_path(const std::filesystem::path& path);

}  // namespace dspark
