// Pinned host memory and copy fences on CUDA (contract: backend/pinned_memory.h).
#include "dspark/backend/pinned_memory.h"

#include <utility>

#include "dspark/backend/cuda/check.h"

namespace dspark {

// ---- PinnedBuffer ------------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) DSPARK_CUDA_CHECK(cudaMallocHost(&data_, bytes_));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) (void)cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) (void)cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- CopyFence ---------------------------------------------------------------------------------

CopyFence::~CopyFence() {
  if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

CopyFence::CopyFence(CopyFence&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CopyFence& CopyFence::operator=(CopyFence&& other) noexcept {
  if (this != &other) {
    if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CopyFence::record(const Context& ctx) {
  if (!event_) {
    cudaEvent_t e = nullptr;
    DSPARK_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
  }
  DSPARK_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_),
                                    static_cast<cudaStream_t>(ctx.cuda_stream())));
}

void CopyFence::wait() const {
  if (event_) DSPARK_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

}  // namespace dspark
