// Pinned host memory in a build without CUDA: nothing to pin (contract: backend/pinned_memory.h).
#include "dspark/backend/pinned_memory.h"
#include "dspark/core/error.h"

namespace dspark {
namespace {
[[noreturn]] void no_cuda_pinned_memory() {
  DSPARK_FAIL(unsupported, "dspark was built without CUDA");
}
}  // namespace

PinnedBuffer::PinnedBuffer(size_t) {
  no_cuda_pinned_memory();
}
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept {
  return *this;
}

CopyFence::~CopyFence() = default;
CopyFence::CopyFence(CopyFence&&) noexcept {}
CopyFence& CopyFence::operator=(CopyFence&&) noexcept {
  return *this;
}
void CopyFence::record(const Context&) {
  no_cuda_pinned_memory();
}
void CopyFence::wait() const {
  no_cuda_pinned_memory();
}

}  // namespace dspark
