// MappedFile: a read-only, private (copy-on-write never used) mmap of one whole file. RAII and
// move-only; the mapping lives until destruction. An empty file maps to a null data pointer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace dspark {

class MappedFile {
 public:
  // Throws ErrorKind::io "<file>: <problem>" when the file is missing, not a regular file, or
  // cannot be opened / mapped.
  explicit MappedFile(const std::filesystem::path& file);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dspark
