#include "dspark/spec/draft_steps.h"

#include <algorithm>

#include "dspark/core/philox.h"
#include "dspark/ops/sampling.h"
#include "dspark/ops/softmax.h"
#include "dspark/ops/speculative.h"
#include "dspark/ops/token_mask.h"

namespace dspark {

Tensor ensure_rows(OwnedTensor& t, DType dtype, int64_t rows, int64_t cols, Device device) {
  if (!t.view().defined() || t.view().size(0) < rows || t.view().size(1) != cols ||
      t.device() != device) {
    t = OwnedTensor(dtype, Shape{std::max<int64_t>(rows, 8), cols}, device);
  }
  return t.view().rows(0, rows);
}

void DraftSteps::begin(Context& ctx, std::span<const ProposeRequest> requests, int64_t vocab) {
  requests_ = requests;
  max_k_ = 0;
  any_sampled_ = false;
  n_drafted_ = 0;
  limit_.clear();
  for (const auto& q : requests) {
    limit_.push_back(std::max(q.max_tokens, 0));
    max_k_ = std::max(max_k_, q.max_tokens);
    any_sampled_ = any_sampled_ || !q.sampling.greedy();
  }
  q_all_ = Tensor();
  if (any_sampled_ && max_k_ > 0)
    q_all_ = ensure_rows(q_, DType::f32, static_cast<int64_t>(requests.size()) * max_k_, vocab,
                         ctx.device());
}

std::vector<int32_t> DraftSteps::choose(Context& ctx, const Tensor& logits,
                                        std::span<const size_t> active,
                                        std::span<const uint64_t> positions, int step) {
  mask_rows_.clear();
  mask_words_.clear();
  for (size_t a = 0; a < active.size(); ++a) {
    DraftGrammar* g = requests_[active[a]].grammar;
    if (!g) continue;
    const std::span<const uint32_t> mask = g->mask(logits.size(1));
    mask_rows_.push_back(static_cast<int32_t>(a));
    mask_words_.insert(mask_words_.end(), mask.begin(), mask.end());
  }
  if (!mask_rows_.empty()) apply_token_mask(ctx, logits, mask_rows_, mask_words_);
  const std::vector<int32_t> tokens = choose_tokens(ctx, logits, active, positions, step);
  for (size_t a = 0; a < active.size(); ++a) {
    DraftGrammar* g = requests_[active[a]].grammar;
    if (!g) continue;
    int& limit = limit_[active[a]];
    if (!g->advance(tokens[a])) {
      limit = step;  // never after a masked choice; dropped all the same
    } else if (g->ended()) {
      limit = step + 1;  // the EOS is the last draft
    }
  }
  return tokens;
}

std::vector<int32_t> DraftSteps::choose_tokens(Context& ctx, const Tensor& logits,
                                               std::span<const size_t> active,
                                               std::span<const uint64_t> positions, int step) {
  const auto m = static_cast<int64_t>(active.size());
  if (!any_sampled_) {
    Tensor best = ensure_rows(step_tokens_, DType::i32, m, 1, ctx.device()).reshape(Shape{m});
    argmax(ctx, logits, best);
    return to_vector<int32_t>(best);
  }
  std::vector<SamplingParams> params(static_cast<size_t>(m));
  std::vector<float> u(static_cast<size_t>(m));
  for (size_t a = 0; a < active.size(); ++a) {
    const ProposeRequest& req = requests_[active[a]];
    params[a] = req.sampling;
    u[a] = philox_uniform(req.seed, positions[a], draft_lane(req.sampling.spec));
  }
  Tensor probs = ensure_rows(step_probs_, DType::f32, m, logits.size(1), ctx.device());
  process_logits(ctx, logits, params, probs);
  Tensor u_t = ensure_rows(uniforms_, DType::f32, m, 1, ctx.device()).reshape(Shape{m});
  ctx.copy_async(u_t.data(), u.data(), u.size() * sizeof(float));
  Tensor tok = ensure_rows(step_tokens_, DType::i32, m, 1, ctx.device()).reshape(Shape{m});
  sample_from_probs(ctx, probs, u_t, tok);
  for (size_t a = 0; a < active.size(); ++a) {
    const int64_t slot = static_cast<int64_t>(active[a]) * max_k_ + step;
    const auto row = static_cast<int64_t>(a);
    copy_tensor(q_all_.rows(slot, slot + 1), probs.rows(row, row + 1));
  }
  return to_vector<int32_t>(tok);
}

void DraftSteps::finish(const std::vector<std::vector<int32_t>>& drafts, Proposal& out) {
  const int64_t base = static_cast<int64_t>(out.tokens.size());
  std::vector<size_t> counts(drafts.size());
  for (size_t i = 0; i < drafts.size(); ++i) {
    counts[i] = std::min(drafts[i].size(), static_cast<size_t>(limit_[i]));
    out.tokens.insert(out.tokens.end(), drafts[i].begin(),
                      drafts[i].begin() + static_cast<int64_t>(counts[i]));
    out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
    n_drafted_ += static_cast<int64_t>(counts[i]);
  }
  if (!any_sampled_) return;
  DSPARK_CHECK(base == 0, "drafter: a sampled proposal must be the only one in `out`");
  const int64_t total = static_cast<int64_t>(out.tokens.size());
  // Compact q rows in proposal order (request i, step j) -> row indptr[i] + j; in place is safe
  // because the destination index never exceeds the source index.
  int64_t dst = 0;
  for (size_t i = 0; i < drafts.size(); ++i)
    for (size_t j = 0; j < counts[i]; ++j, ++dst) {
      const int64_t src = static_cast<int64_t>(i) * max_k_ + static_cast<int64_t>(j);
      if (src != dst) copy_tensor(q_all_.rows(dst, dst + 1), q_all_.rows(src, src + 1));
    }
  out.q = total > 0 ? q_all_.rows(0, total) : Tensor();
}

}  // namespace dspark
