// apply_token_mask (contract: ops/token_mask.h): one thread per (masked row, token); the 32
// threads of a warp read one mask word. Rows and mask words are uploaded through the context's
// scratch. Rows listed twice only ever write -inf, so they do not race on a result.
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

__global__ void token_mask_kernel(float* logits, int64_t stride, int64_t v, int64_t words,
                                  const int32_t* rows, const uint32_t* mask, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / v, t = i - r * v;
    const uint32_t bits = mask[r * words + (t >> 5)];
    if (((bits >> (t & 31)) & 1u) == 0) logits[rows[r] * stride + t] = -INFINITY;
  }
}

}  // namespace

void apply_token_mask(Context& ctx, const Tensor& logits, std::span<const int32_t> rows,
                      std::span<const uint32_t> mask) {
  ScratchUpload up;
  const size_t rows_off = up.add(rows);
  const size_t mask_off = up.add(mask);
  char* base = up.upload(ctx);
  const int64_t v = logits.size(1);
  const auto n = static_cast<int64_t>(rows.size()) * v;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, kThreads), 8192));
  token_mask_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(
      logits.data_as<float>(), logits.stride(0), v, (v + 31) / 32,
      reinterpret_cast<const int32_t*>(base + rows_off),
      reinterpret_cast<const uint32_t*>(base + mask_off), n);
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace dspark::cuda
