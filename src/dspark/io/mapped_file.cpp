#include "dspark/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "dspark/core/error.h"

namespace dspark {

namespace {
// Closes a file descriptor on scope exit (the mapping stays valid after close).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

MappedFile::MappedFile(const std::filesystem::path& file) : path_(file) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  DSPARK_CHECK_KIND(io, std::filesystem::exists(status), "{}: file not found", file.string());
  DSPARK_CHECK_KIND(io, std::filesystem::is_regular_file(status), "{}: not a regular file",
                    file.string());
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  DSPARK_CHECK_KIND(io, fd >= 0, "{}: cannot open ({})", file.string(), std::strerror(errno));
  FdCloser closer{fd};
  struct stat st {};
  DSPARK_CHECK_KIND(io, ::fstat(fd, &st) == 0, "{}: cannot stat ({})", file.string(),
                    std::strerror(errno));
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap of length 0 is an error; an empty file has no bytes to view
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  DSPARK_CHECK_KIND(io, p != MAP_FAILED, "{}: cannot mmap {} bytes ({})", file.string(), size_,
                    std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace dspark
