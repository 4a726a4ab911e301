// rope: in place on x [n, heads, head_dim] (NeoX / rotate_half layout). One block per token:
// the block first computes cos/sin of positions[i] * inv_freq[j] for j < rotary_dim / 2 into
// shared memory (precise sincosf, as the CPU's std::cos / std::sin in f32), then rotates every
// (head, j) pair of the token.
#include <algorithm>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/rope_table.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHalf = 1024;  // rotary_dim / 2 limit of the shared cos/sin table

template <typename T>
struct RopeParams {
  T* x;
  int64_t token_stride;
  int64_t head_stride;
  int heads;
  int half;  // rotary_dim / 2
  const int32_t* positions;
  const float* inv_freq;
  float attention_scaling;
};

template <typename T>
__global__ void rope_kernel(RopeParams<T> p) {
  __shared__ float s_cos[kMaxHalf];
  __shared__ float s_sin[kMaxHalf];
  const int64_t token = blockIdx.x;
  const float pos = static_cast<float>(p.positions[token]);
  device::fill_rope_table(pos, p.inv_freq, p.half, p.attention_scaling, s_cos, s_sin);
  __syncthreads();
  T* x = p.x + token * p.token_stride;
  const int pairs = p.heads * p.half;
  for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
    const int h = idx / p.half, j = idx - h * p.half;
    T* xh = x + h * p.head_stride;
    const float x1 = device::to_float(xh[j]);
    const float x2 = device::to_float(xh[j + p.half]);
    xh[j] = device::from_float<T>(x1 * s_cos[j] - x2 * s_sin[j]);
    xh[j + p.half] = device::from_float<T>(x2 * s_cos[j] + x1 * s_sin[j]);
  }
}

}  // namespace

void rope(Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          float attention_scaling) {
  const int64_t n = x.size(0);
  const int half = static_cast<int>(inv_freq.numel());
  if (n == 0 || half == 0) return;
  DSPARK_CHECK_KIND(unsupported, half <= kMaxHalf, "rope on CUDA: rotary_dim {} > {}", 2 * half,
                    2 * kMaxHalf);
  DSPARK_CHECK(x.dim() == 2 || x.dim() == 3, "rope: x must be [n, heads, head_dim] ({})",
               x.describe());
  DSPARK_CHECK(x.stride(-1) == 1, "rope: head_dim must be contiguous ({})", x.describe());
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    RopeParams<device_t<T>> p{};
    p.x = device_ptr<T>(x);
    p.token_stride = x.stride(0);
    p.head_stride = x.dim() == 3 ? x.stride(1) : 0;
    p.heads = x.dim() == 3 ? static_cast<int>(x.size(1)) : 1;
    p.half = half;
    p.positions = static_cast<const int32_t*>(positions.data());
    p.inv_freq = static_cast<const float*>(inv_freq.data());
    p.attention_scaling = attention_scaling;
    rope_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream_of(ctx)>>>(p);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dspark::cuda
