// Writing GGUF files (version 3, the layout io/gguf.h reads): metadata, tensor infos, then each
// tensor's data aligned to 32 bytes. Used by `dspark quantize --format q8_0|q4_0|...`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dspark/io/gguf.h"

namespace dspark {

// Metadata values of the types GGUF writers use.
inline GgufValue gguf_string(std::string s) {
  return {GgufValue::Type::string, GgufValue::Type::u8, std::move(s)};
}
inline GgufValue gguf_u32(int64_t v) {
  return {GgufValue::Type::u32, GgufValue::Type::u8, v};
}
inline GgufValue gguf_f32(double v) {
  return {GgufValue::Type::f32, GgufValue::Type::u8, v};
}
inline GgufValue gguf_bool(bool v) {
  return {GgufValue::Type::boolean, GgufValue::Type::u8, v};
}
inline GgufValue gguf_strings(std::vector<std::string> v) {
  return {GgufValue::Type::array, GgufValue::Type::string, std::move(v)};
}
inline GgufValue gguf_i32s(std::vector<int64_t> v) {
  return {GgufValue::Type::array, GgufValue::Type::i32, std::move(v)};
}

struct GgufTensorOut {
  std::string name;
  GgmlType type = GgmlType::f32;
  Shape shape;  // row-major (written reversed, as GGUF stores dims)
};

// The bytes of a tensor of `type` with `shape` (its last dim a multiple of the type's block).
int64_t gguf_tensor_bytes(GgmlType type, const Shape& shape);

// Writes `file`: the metadata in order (scalars of every GgufValue type; arrays of scalars or
// strings), the tensor infos, then tensor i's data, which `fill(i, dst)` writes into dst
// (gguf_tensor_bytes bytes), one tensor at a time. Throws ErrorKind::io when the file cannot be
// written.
void write_gguf(const std::filesystem::path& file,
                const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorOut>& tensors,
                const std::function<void(size_t, uint8_t*)>& fill);

}  // namespace dspark
