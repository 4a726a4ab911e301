// The block-wide inverse-CDF draw, shared by plain sampling (sample, sample_from_probs) and the
// coupled speculative verifier: with the same block size both add the same numbers in the same
// order, so they draw the same token from the same probabilities and uniform.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dspark/backend/cuda/device/reduce.cuh"

namespace dspark::cuda::device {

// The block size of every kernel that draws tokens (sample, sample_from_probs, speculative_accept):
// one size, so that their draws add in the same order.
inline constexpr int kDrawThreads = 512;

// Shared memory of draw_index for blocks of at most kMaxThreads threads.
template <int kMaxThreads>
struct InverseCdfShared {
  double part[kMaxThreads];
  int warp_last[kMaxThreads / 32];
  int64_t owner;
  double base;
  double target;
  int32_t token;
};

// Inverse-CDF draw over q[0, n) with uniform u (entries <= 0 or NaN count as 0): the first i whose
// cumulative sum exceeds u * total; the last positive entry if rounding leaves none; 0 if none is
// positive. Called by every thread of the block (blockDim.x a multiple of 32, <= kMaxThreads);
// every thread returns the token. Thread t owns the contiguous chunk [t * chunk, (t + 1) * chunk):
// chunk sums, a serial exclusive scan over the chunks, then the owning thread rescans its chunk
// with the same partial sums it reduced (so its chunk provably contains the crossing). The sums
// depend on blockDim.x: callers that must agree use the same block size.
template <int kMaxThreads>
__device__ int32_t draw_index(const float* q, int64_t n, float u,
                              InverseCdfShared<kMaxThreads>& sh) {
  const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
  const int64_t lo = threadIdx.x * chunk, hi = min(n, lo + chunk);
  double local = 0.0;
  int64_t last_positive = -1;
  for (int64_t i = lo; i < hi; ++i) {
    const float v = q[i];
    if (v > 0.0f) {
      local += v;
      last_positive = i;
    }
  }
  __syncthreads();
  sh.part[threadIdx.x] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (unsigned t = 0; t < blockDim.x; ++t) total += sh.part[t];
    const double target = static_cast<double>(u) * total;
    double acc = 0.0;
    sh.owner = -1;
    for (unsigned t = 0; t < blockDim.x; ++t) {
      const double next = acc + sh.part[t];
      if (next > target) {
        sh.owner = t;
        sh.base = acc;
        break;
      }
      acc = next;
    }
    sh.target = target;
    sh.token = -1;
  }
  __syncthreads();
  if (static_cast<int64_t>(threadIdx.x) == sh.owner) {
    double partial = 0.0;  // the same additions, in the same order, as `local`
    for (int64_t i = lo; i < hi; ++i) {
      const float v = q[i];
      if (!(v > 0.0f)) continue;
      partial += v;
      if (sh.base + partial > sh.target) {
        sh.token = static_cast<int32_t>(i);
        break;
      }
    }
  }
  __syncthreads();
  if (sh.token >= 0) return sh.token;
  // Fallback: the last positive entry (block max of each chunk's last positive index).
  int idx = static_cast<int>(last_positive);
  for (int offset = 16; offset > 0; offset >>= 1)
    idx = max(idx, __shfl_xor_sync(kFullMask, idx, offset));
  if ((threadIdx.x & 31) == 0) sh.warp_last[threadIdx.x >> 5] = idx;
  __syncthreads();
  int best = -1;
  for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) best = max(best, sh.warp_last[w]);
  return best < 0 ? 0 : best;
}

}  // namespace dspark::cuda::device
