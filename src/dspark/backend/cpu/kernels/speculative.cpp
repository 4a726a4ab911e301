// CPU kernel of the speculative accept/resample step (contract: ops/speculative.h).
#include <cstdint>

#include "dspark/backend/cpu/inverse_cdf.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/philox.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

// Inverse-CDF draw over weights w_i = max(0, p_i - q_i) (q null: p alone; q_onehot >= 0: p with
// that index removed); falls back to p when the residual mass is zero.
int32_t draw_residual(const float* p, const float* q, int32_t q_onehot, int64_t vocab, float u) {
  auto weight = [&](int64_t i) -> double {
    double w = p[i];
    if (q)
      w -= q[i];
    else if (i == q_onehot)
      w = 0.0;
    return w > 0.0 ? w : 0.0;
  };
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += weight(i);
  const bool residual = total > 0.0;
  if (!residual) {
    total = 0.0;
    for (int64_t i = 0; i < vocab; ++i) total += p[i] > 0.0f ? p[i] : 0.0f;
  }
  const double target = static_cast<double>(u) * total;
  double cum = 0.0;
  int32_t last = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double w = residual ? weight(i) : (p[i] > 0.0f ? p[i] : 0.0);
    if (w <= 0.0) continue;
    cum += w;
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;
}

// Coupled row: the target's own sample at each position decides (contract: ops/speculative.h).
void accept_coupled(const float* p, int64_t vocab, const int32_t* drafts, int64_t k, uint64_t seed,
                    int64_t position, int32_t& n_accepted, int32_t& next) {
  for (int64_t j = 0; j <= k; ++j) {
    const uint64_t counter = static_cast<uint64_t>(position + j);
    const int32_t t = draw_index(p + j * vocab, vocab, philox_uniform(seed, counter, kLaneSample));
    if (j == k || drafts[j] != t) {
      n_accepted = static_cast<int32_t>(j);
      next = t;
      return;
    }
  }
}

// Rejection row: accept x_j with probability min(1, p/q), else resample from the residual.
void accept_rejection(const float* p, const float* q, int64_t vocab, const int32_t* drafts,
                      int64_t k, uint64_t seed, int64_t position, int32_t& n_accepted,
                      int32_t& next) {
  for (int64_t j = 0; j < k; ++j) {
    const int32_t x = drafts[j];
    const float* pj = p + j * vocab;
    const float* qj = q ? q + j * vocab : nullptr;
    const float px = (x >= 0 && x < vocab) ? pj[x] : 0.0f;
    const float qx = qj ? ((x >= 0 && x < vocab) ? qj[x] : 0.0f) : 1.0f;
    const uint64_t counter = static_cast<uint64_t>(position + j);
    const float u = philox_uniform(seed, counter, kLaneAccept);
    if (px > 0.0f && u * qx < px) continue;
    const float u2 = philox_uniform(seed, counter, kLaneResample);
    n_accepted = static_cast<int32_t>(j);
    next = draw_residual(pj, qj, qj ? -1 : x, vocab, u2);
    return;
  }
  const float u2 = philox_uniform(seed, static_cast<uint64_t>(position + k), kLaneResample);
  n_accepted = static_cast<int32_t>(k);
  next = draw_residual(p + k * vocab, nullptr, -1, vocab, u2);
}

}  // namespace

void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& modes, const Tensor& n_accepted, const Tensor& next_token) {
  const int64_t n = n_accepted.size(0);
  const int64_t vocab = p.size(1);
  const float* pd = p.data_as<float>();
  const float* qd = q.defined() ? q.data_as<float>() : nullptr;
  const int32_t* tokens = draft_tokens.data_as<int32_t>();
  const int32_t* indptr = draft_indptr.data_as<int32_t>();
  const int64_t* seed = seeds.data_as<int64_t>();
  const int32_t* pos = positions.data_as<int32_t>();
  const int32_t* mode = modes.data_as<int32_t>();
  int32_t* out_n = n_accepted.data_as<int32_t>();
  int32_t* out_tok = next_token.data_as<int32_t>();
  ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t d0 = indptr[r];
      const int64_t k = indptr[r + 1] - d0;
      const float* pr = pd + (d0 + r) * vocab;  // p_0 of the row
      const uint64_t s = static_cast<uint64_t>(seed[r]);
      if (mode[r] == static_cast<int32_t>(SpecSampling::coupled)) {
        accept_coupled(pr, vocab, tokens + d0, k, s, pos[r], out_n[r], out_tok[r]);
      } else {
        accept_rejection(pr, qd ? qd + d0 * vocab : nullptr, vocab, tokens + d0, k, s, pos[r],
                         out_n[r], out_tok[r]);
      }
    }
  });
}

}  // namespace dspark::cpu
