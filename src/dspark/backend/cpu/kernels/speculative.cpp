// CPU kernel of the speculative accept/resample step (contract: ops/speculative.h).
#include <cstdint>

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
    if (q) w -= q[i];
    else if (i == q_onehot) w = 0.0;
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

}  // namespace

void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& n_accepted, const Tensor& next_token) {
  const int64_t n = n_accepted.size(0);
  const int64_t vocab = p.size(1);
  const float* pd = p.data_as<float>();
  const float* qd = q.defined() ? q.data_as<float>() : nullptr;
  const int32_t* tokens = draft_tokens.data_as<int32_t>();
  const int32_t* indptr = draft_indptr.data_as<int32_t>();
  const int64_t* seed = seeds.data_as<int64_t>();
  const int32_t* pos = positions.data_as<int32_t>();
  int32_t* out_n = n_accepted.data_as<int32_t>();
  int32_t* out_tok = next_token.data_as<int32_t>();
  ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t d0 = indptr[r];
      const int64_t k = indptr[r + 1] - d0;
      const int64_t p0 = d0 + r;
      const uint64_t s = static_cast<uint64_t>(seed[r]);
      int32_t accepted = 0;
      int32_t next = -1;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t x = tokens[d0 + j];
        const float* pj = pd + (p0 + j) * vocab;
        const float* qj = qd ? qd + (d0 + j) * vocab : nullptr;
        const float px = (x >= 0 && x < vocab) ? pj[x] : 0.0f;
        const float qx = qj ? ((x >= 0 && x < vocab) ? qj[x] : 0.0f) : 1.0f;
        const uint64_t counter = static_cast<uint64_t>(pos[r] + j);
        const float u = philox_uniform(s, counter, kLaneAccept);
        if (px > 0.0f && u * qx < px) {
          ++accepted;
          continue;
        }
        const float u2 = philox_uniform(s, counter, kLaneResample);
        next = draw_residual(pj, qj, qj ? -1 : x, vocab, u2);
        break;
      }
      if (accepted == k) {
        const float u2 = philox_uniform(s, static_cast<uint64_t>(pos[r] + k), kLaneResample);
        next = draw_residual(pd + (p0 + k) * vocab, nullptr, -1, vocab, u2);
      }
      out_n[r] = accepted;
      out_tok[r] = next;
    }
  });
}

}  // namespace dspark::cpu
