#include "dspark/spec/verifier.h"

#include "dspark/ops/sampling.h"
#include "dspark/ops/softmax.h"
#include "dspark/ops/speculative.h"

namespace dspark {
namespace {

// Grows `t` (contents discarded) so it holds at least `numel` elements of `dtype`.
Tensor ensure(OwnedTensor& t, DType dtype, int64_t numel, Device device) {
  if (!t.view().defined() || t.view().numel() < numel || t.device() != device) {
    t = OwnedTensor(dtype, Shape{std::max<int64_t>(numel, 64)}, device);
  }
  return t.view().slice(0, 0, numel);
}

}  // namespace

VerifyResult Verifier::verify(Context& ctx, const Tensor& target_logits, const Proposal& proposal,
                              std::span<const SamplingParams> params,
                              std::span<const uint64_t> seeds,
                              std::span<const int32_t> positions) {
  const int64_t n = static_cast<int64_t>(proposal.indptr.size()) - 1;
  DSPARK_CHECK(n >= 0 && static_cast<int64_t>(params.size()) == n &&
                   static_cast<int64_t>(seeds.size()) == n &&
                   static_cast<int64_t>(positions.size()) == n,
               "verify: {} requests but {} params, {} seeds, {} positions", n, params.size(),
               seeds.size(), positions.size());
  const int64_t n_drafts = static_cast<int64_t>(proposal.tokens.size());
  DSPARK_CHECK(proposal.indptr.back() == n_drafts, "verify: proposal indptr/tokens mismatch");
  DSPARK_CHECK(target_logits.dim() == 2 && target_logits.size(0) == n_drafts + n,
               "verify: {} logits rows for {} drafts in {} requests",
               target_logits.dim() == 2 ? target_logits.size(0) : -1, n_drafts, n);
  if (n == 0) return {};

  bool all_greedy = !proposal.q.defined();
  for (const auto& p : params) all_greedy = all_greedy && p.greedy();
  if (all_greedy) return verify_greedy(ctx, target_logits, proposal);

  const Device device = ctx.device();
  const int64_t vocab = target_logits.size(1);
  const int64_t rows = n_drafts + n;

  // p: each logits row processed with its request's parameters.
  std::vector<SamplingParams> row_params(static_cast<size_t>(rows));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = proposal.indptr[i] + i; j <= proposal.indptr[i + 1] + i; ++j)
      row_params[static_cast<size_t>(j)] = params[static_cast<size_t>(i)];
  Tensor p = ensure(probs_, DType::f32, rows * vocab, device).reshape(Shape{rows, vocab});
  process_logits(ctx, target_logits, row_params, p);

  // One packed upload: [tokens | indptr | positions | n_accepted | next_token].
  std::vector<int32_t> host;
  host.reserve(static_cast<size_t>(n_drafts + 4 * n + 1));
  host.insert(host.end(), proposal.tokens.begin(), proposal.tokens.end());
  host.insert(host.end(), proposal.indptr.begin(), proposal.indptr.end());
  host.insert(host.end(), positions.begin(), positions.end());
  Tensor packed = ensure(packed_, DType::i32, static_cast<int64_t>(host.size()) + 2 * n, device);
  ctx.copy_async(packed.data(), host.data(), host.size() * sizeof(int32_t));
  Tensor seed_t = ensure(seeds_, DType::i64, n, device);
  ctx.copy_async(seed_t.data(), seeds.data(), seeds.size() * sizeof(uint64_t));

  int64_t at = 0;
  auto take = [&](int64_t count) {
    Tensor t = packed.slice(0, at, at + count);
    at += count;
    return t;
  };
  Tensor tokens = take(n_drafts);
  Tensor indptr = take(n + 1);
  Tensor pos = take(n);
  Tensor out = take(2 * n);
  speculative_accept(ctx, p, proposal.q, tokens, indptr, seed_t, pos, out.slice(0, 0, n),
                     out.slice(0, n, 2 * n));
  const std::vector<int32_t> result = to_vector<int32_t>(out);  // the round's one device read
  VerifyResult r;
  r.n_accepted.assign(result.begin(), result.begin() + n);
  r.next_token.assign(result.begin() + n, result.end());
  return r;
}

VerifyResult Verifier::verify_greedy(Context& ctx, const Tensor& target_logits,
                                     const Proposal& proposal) {
  const int64_t n = static_cast<int64_t>(proposal.indptr.size()) - 1;
  const int64_t rows = target_logits.size(0);
  Tensor best = ensure(packed_, DType::i32, rows, ctx.device());
  argmax(ctx, target_logits, best);
  const std::vector<int32_t> target = to_vector<int32_t>(best);  // the round's one device read
  VerifyResult r;
  r.n_accepted.resize(static_cast<size_t>(n));
  r.next_token.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t d0 = proposal.indptr[i];
    const int32_t k = proposal.indptr[i + 1] - d0;
    const int64_t row0 = d0 + i;  // target row scoring draft 0
    int32_t j = 0;
    while (j < k && proposal.tokens[d0 + j] == target[row0 + j]) ++j;
    r.n_accepted[i] = j;
    r.next_token[i] = target[row0 + j];
  }
  return r;
}

}  // namespace dspark
