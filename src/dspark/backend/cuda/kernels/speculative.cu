// CUDA kernel of the speculative accept/resample step (contract: ops/speculative.h).
// One CTA per request row. Coupled rows draw the target's sample at each position with the block
// draw of plain sampling (device/inverse_cdf.cuh, same block size: the same token as sample()).
// Rejection rows: the accept tests are scalar and sequential over the row's drafts; the residual /
// bonus draw is a block-wide inverse CDF (segment sums in double, exclusive scan over threads,
// then a sequential scan inside the one segment that holds the target).
#include <cuda_runtime.h>

#include <cstdint>

#include "dspark/backend/cuda/check.h"
#include "dspark/backend/cuda/device/inverse_cdf.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/core/philox.h"

namespace dspark::cuda {
namespace {

constexpr int kThreads = device::kDrawThreads;

struct AcceptParams {
  const float* p;
  const float* q;  // null: one-hot drafts
  const int32_t* draft_tokens;
  const int32_t* draft_indptr;
  const int64_t* seeds;
  const int32_t* positions;
  const int32_t* modes;  // SpecSampling per row
  int32_t* n_accepted;
  int32_t* next_token;
  int64_t vocab;
};

__device__ __forceinline__ double residual_weight(const float* p, const float* q, int32_t onehot,
                                                  bool residual, int64_t i) {
  double w = p[i];
  if (residual) {
    if (q)
      w -= q[i];
    else if (i == onehot)
      w = 0.0;
  }
  return w > 0.0 ? w : 0.0;
}

// Block-wide inverse-CDF draw; every thread returns the same index.
__device__ int32_t block_draw(const float* p, const float* q, int32_t onehot, int64_t vocab,
                              float u) {
  __shared__ double s_part[kThreads];
  __shared__ double s_total;
  __shared__ bool s_residual;
  const int t = threadIdx.x;
  const int64_t seg = (vocab + kThreads - 1) / kThreads;
  const int64_t lo = t * seg;
  const int64_t hi = lo + seg < vocab ? lo + seg : vocab;

  for (int pass = 0; pass < 2; ++pass) {
    const bool residual = pass == 0;
    double sum = 0.0;
    for (int64_t i = lo; i < hi; ++i) sum += residual_weight(p, q, onehot, residual, i);
    s_part[t] = sum;
    __syncthreads();
    if (t == 0) {  // exclusive scan (kThreads doubles: cheap next to the segment sums)
      double acc = 0.0;
      for (int i = 0; i < kThreads; ++i) {
        const double v = s_part[i];
        s_part[i] = acc;
        acc += v;
      }
      s_total = acc;
      s_residual = residual;
    }
    __syncthreads();
    if (s_total > 0.0 || pass == 1) break;
    __syncthreads();
  }
  const bool residual = s_residual;
  const double target = static_cast<double>(u) * s_total;
  // The owner segment: the last segment whose prefix <= target and that has positive mass.
  double cum = s_part[t];
  int32_t last = -1;
  bool found = false;
  for (int64_t i = lo; i < hi; ++i) {
    const double w = residual_weight(p, q, onehot, residual, i);
    if (w <= 0.0) continue;
    cum += w;
    last = static_cast<int32_t>(i);
    if (cum > target) {
      found = true;
      break;
    }
  }
  // The smallest thread index that found the target wins (matches the sequential scan); when
  // rounding leaves the target beyond the total, the last positive index is chosen.
  __shared__ int32_t s_first;
  __shared__ int32_t s_last_positive;
  if (t == 0) {
    s_first = 0x7fffffff;
    s_last_positive = -1;
  }
  __syncthreads();
  if (found) atomicMin(&s_first, static_cast<int32_t>(t));
  if (last >= 0) atomicMax(&s_last_positive, last);
  __syncthreads();
  if (s_first == 0x7fffffff) return s_last_positive < 0 ? 0 : s_last_positive;
  __shared__ int32_t s_pick;
  if (t == s_first) s_pick = last;
  __syncthreads();
  return s_pick;
}

// A coupled row: the target's own sample at each position decides.
__device__ void accept_coupled(const AcceptParams& a, int r, int64_t d0, int64_t k, int64_t p0,
                               uint64_t seed) {
  __shared__ device::InverseCdfShared<kThreads> sh;
  for (int64_t j = 0; j <= k; ++j) {
    const uint64_t counter = static_cast<uint64_t>(a.positions[r] + j);
    const float u = philox_uniform(seed, counter, kLaneSample);
    const int32_t t = device::draw_index(a.p + (p0 + j) * a.vocab, a.vocab, u, sh);
    if (j == k || a.draft_tokens[d0 + j] != t) {
      if (threadIdx.x == 0) {
        a.n_accepted[r] = static_cast<int32_t>(j);
        a.next_token[r] = t;
      }
      return;
    }
  }
}

__global__ void __launch_bounds__(kThreads) accept_kernel(AcceptParams a) {
  const int r = blockIdx.x;
  const int64_t d0 = a.draft_indptr[r];
  const int64_t k = a.draft_indptr[r + 1] - d0;
  const int64_t p0 = d0 + r;
  const uint64_t seed = static_cast<uint64_t>(a.seeds[r]);
  if (a.modes[r] == static_cast<int32_t>(SpecSampling::coupled)) {
    accept_coupled(a, r, d0, k, p0, seed);
    return;
  }
  int64_t j = 0;
  for (; j < k; ++j) {
    const int32_t x = a.draft_tokens[d0 + j];
    const float* pj = a.p + (p0 + j) * a.vocab;
    const float* qj = a.q ? a.q + (d0 + j) * a.vocab : nullptr;
    const bool in_range = x >= 0 && x < a.vocab;
    const float px = in_range ? pj[x] : 0.0f;
    const float qx = qj ? (in_range ? qj[x] : 0.0f) : 1.0f;
    const uint64_t counter = static_cast<uint64_t>(a.positions[r] + j);
    const float u = philox_uniform(seed, counter, kLaneAccept);
    if (px > 0.0f && u * qx < px) continue;
    const float u2 = philox_uniform(seed, counter, kLaneResample);
    const int32_t next = block_draw(pj, qj, qj ? -1 : x, a.vocab, u2);
    if (threadIdx.x == 0) {
      a.n_accepted[r] = static_cast<int32_t>(j);
      a.next_token[r] = next;
    }
    return;
  }
  const float u2 = philox_uniform(seed, static_cast<uint64_t>(a.positions[r] + k), kLaneResample);
  const int32_t next = block_draw(a.p + (p0 + k) * a.vocab, nullptr, -1, a.vocab, u2);
  if (threadIdx.x == 0) {
    a.n_accepted[r] = static_cast<int32_t>(k);
    a.next_token[r] = next;
  }
}

}  // namespace

void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& modes, const Tensor& n_accepted, const Tensor& next_token) {
  AcceptParams a{};
  a.p = p.data_as<float>();
  a.q = q.defined() ? q.data_as<float>() : nullptr;
  a.draft_tokens = draft_tokens.data_as<int32_t>();
  a.draft_indptr = draft_indptr.data_as<int32_t>();
  a.seeds = seeds.data_as<int64_t>();
  a.positions = positions.data_as<int32_t>();
  a.modes = modes.data_as<int32_t>();
  a.n_accepted = n_accepted.data_as<int32_t>();
  a.next_token = next_token.data_as<int32_t>();
  a.vocab = p.size(1);
  const int n = static_cast<int>(n_accepted.size(0));
  accept_kernel<<<n, kThreads, 0, static_cast<cudaStream_t>(ctx.cuda_stream())>>>(a);
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace dspark::cuda
