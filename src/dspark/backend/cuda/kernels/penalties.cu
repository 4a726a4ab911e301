// apply_penalties (contract: ops/penalties.h): one thread per entry (entries name distinct
// logits, so there are no races); the entries are uploaded through the context's scratch. The
// arithmetic uses the explicitly rounded intrinsics, so that no multiply-add is fused and the
// result equals the CPU kernel's bit for bit.
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

__global__ void penalties_kernel(float* logits, int64_t stride, const PenaltyEntry* entries,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const PenaltyEntry e = entries[i];
    float* x = logits + e.row * stride + e.token;
    float y = *x;
    if (e.repetition != 1.0f)
      y = y > 0.0f ? __fdiv_rn(y, e.repetition) : __fmul_rn(y, e.repetition);
    *x = __fsub_rn(y, e.subtract);
  }
}

}  // namespace

void apply_penalties(Context& ctx, const Tensor& logits, std::span<const PenaltyEntry> entries) {
  ScratchUpload up;
  const size_t off = up.add(entries);
  char* base = up.upload(ctx);
  const auto n = static_cast<int64_t>(entries.size());
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, kThreads), 4096));
  penalties_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(
      logits.data_as<float>(), logits.stride(0), reinterpret_cast<const PenaltyEntry*>(base + off),
      n);
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace dspark::cuda
