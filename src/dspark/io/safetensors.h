// Read-only access to safetensors checkpoints through mmap: a single `model.safetensors`, any
// `*.safetensors` file, or a sharded set described by `model.safetensors.index.json`.
// Tensors are views into the mapping (zero copy); the mapping lives as long as the SafeTensors.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dspark/core/tensor.h"

namespace dspark {

class MappedFile;  // RAII mmap of one file (io/mapped_file.h)

class SafeTensors {
 public:
  // `path`: a checkpoint directory (index.json shards, else model.safetensors, else the only
  // *.safetensors file) or one .safetensors file. Throws ErrorKind::io with the file name and the
  // problem (missing, truncated, bad header, offsets out of range); ErrorKind::unsupported naming
  // the tensor for a dtype outside F32/BF16/F16/I32/U32/I64/I8/U8/BOOL/F8_E4M3 (BOOL loads as u8,
  // U32 as i32: the same bits, read as words by io/mlx_quant.h; F8_E4M3 as u8 codes, read by
  // io/fp8_quant.h).
  static SafeTensors open(const std::filesystem::path& path);

  SafeTensors(SafeTensors&&) noexcept;
  SafeTensors& operator=(SafeTensors&&) noexcept;
  ~SafeTensors();

  bool contains(const std::string& name) const;
  // A CPU view of the tensor's bytes in the mapping (dtype as stored: f32/bf16/f16/i32/i64/...).
  // Throws io "tensor 'name' not found in <dir>" when absent.
  Tensor get(const std::string& name) const;
  // Whether the tensor is stored as F8_E4M3 (its u8 view holds E4M3 codes); false when absent.
  bool is_e4m3(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // The bytes tensor `name` occupies in its file (0 when absent), and those of every tensor.
  size_t bytes(const std::string& name) const;
  size_t total_bytes() const;
  const std::filesystem::path& path() const { return path_; }
  // The "__metadata__" entries of the (first) header.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafeTensors();
  struct Entry {
    int file = 0;
    DType dtype = DType::f32;
    Shape shape;
    size_t offset = 0;  // absolute offset in the file
    size_t bytes = 0;
    bool e4m3 = false;  // stored as F8_E4M3
  };
  std::filesystem::path path_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (CPU, contiguous) to one .safetensors file. Used by dspark quantize, tools and
// tests. The i32 tensors named in `as_u32` are stored as U32 (MLX's packed quantized words, which
// SafeTensors reads back as i32).
void write_safetensors(const std::filesystem::path& file,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::set<std::string>& as_u32 = {});

}  // namespace dspark
