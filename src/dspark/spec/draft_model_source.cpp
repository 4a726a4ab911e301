#include "dspark/spec/draft_model_source.h"

#include <algorithm>
#include <chrono>

#include "dspark/core/philox.h"
#include "dspark/ops/sampling.h"
#include "dspark/ops/softmax.h"
#include "dspark/ops/speculative.h"

namespace dspark {
namespace {

Tensor ensure_rows(OwnedTensor& t, DType dtype, int64_t rows, int64_t cols, Device device) {
  if (!t.view().defined() || t.view().size(0) < rows || t.view().size(1) != cols ||
      t.device() != device) {
    t = OwnedTensor(dtype, Shape{std::max<int64_t>(rows, 8), cols}, device);
  }
  return t.view().rows(0, rows);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DraftModelSource::DraftModelSource(std::unique_ptr<Model> model, int kv_tokens, int page_size)
    : model_(std::move(model)),
      kv_(model_->kv_shape(page_size, (kv_tokens + page_size - 1) / page_size + 1),
          model_->device()) {}

DraftModelSource::Row& DraftModelSource::row_ref(RowId row) {
  auto it = rows_.find(row);
  DSPARK_CHECK(it != rows_.end(), "draft model: unknown row {}", row);
  return it->second;
}

void DraftModelSource::begin(Context&, RowId row, std::span<const int32_t> prompt) {
  Row r;
  r.seq = kv_.create_sequence();
  r.history.assign(prompt.begin(), prompt.end());
  rows_[row] = std::move(r);
}

void DraftModelSource::commit(Context&, std::span<const RowUpdate> updates,
                              std::span<const Tensor>) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const RowUpdate& u : updates) {
    Row& r = row_ref(u.row);
    r.history.resize(static_cast<size_t>(u.first_position));
    r.history.insert(r.history.end(), u.kept_tokens.begin(), u.kept_tokens.end());
    if (u.pending >= 0) r.history.push_back(u.pending);
    // Keep the longest prefix of the draft cache that is still part of the committed text.
    size_t keep = 0;
    const size_t limit = std::min(r.kv_tokens.size(), r.history.size());
    while (keep < limit && r.kv_tokens[keep] == r.history[keep]) ++keep;
    if (keep < r.kv_tokens.size()) {
      kv_.rollback_to(r.seq, static_cast<int>(keep));
      r.kv_tokens.resize(keep);
    }
  }
  stats_.commit_ms += ms_since(t0);
}

void DraftModelSource::propose(Context& ctx, std::span<const ProposeRequest> requests,
                               Proposal& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = requests.size();
  const int64_t vocab = model_->config().vocab_size;
  int max_k = 0;
  bool any_sampled = false;
  for (const auto& q : requests) {
    max_k = std::max(max_k, q.max_tokens);
    any_sampled = any_sampled || !q.sampling.greedy();
  }
  std::vector<std::vector<int32_t>> drafts(n);
  // q rows are written per (request, step) into a [n * max_k, vocab] buffer, compacted below.
  Tensor q_all;
  if (any_sampled && max_k > 0)
    q_all = ensure_rows(q_, DType::f32, static_cast<int64_t>(n) * max_k, vocab, ctx.device());

  for (int step = 0; step < max_k; ++step) {
    ForwardBatch batch;
    batch.row_indptr.push_back(0);
    std::vector<size_t> active;
    for (size_t i = 0; i < n; ++i) {
      if (requests[i].max_tokens <= step) continue;
      Row& r = row_ref(requests[i].row);
      // Feed what the draft cache lacks: at step 0 the unprocessed history (>= the pending
      // token), later the previous draft token.
      std::vector<int32_t> feed;
      if (step == 0) {
        feed.assign(r.history.begin() + static_cast<int64_t>(r.kv_tokens.size()), r.history.end());
      } else {
        feed.push_back(drafts[i].back());
      }
      DSPARK_CHECK(!feed.empty(), "draft model: nothing to feed for row {}", requests[i].row);
      batch.tokens.insert(batch.tokens.end(), feed.begin(), feed.end());
      r.kv_tokens.insert(r.kv_tokens.end(), feed.begin(), feed.end());
      batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
      batch.logit_indices.push_back(static_cast<int32_t>(batch.tokens.size()) - 1);
      batch.seqs.push_back(r.seq);
      active.push_back(i);
    }
    if (active.empty()) break;
    ForwardOutput fo = model_->forward(ctx, kv_, batch);
    const int64_t m = static_cast<int64_t>(active.size());
    std::vector<int32_t> tokens;
    if (!any_sampled) {
      Tensor best = ensure_rows(step_tokens_, DType::i32, m, 1, ctx.device()).reshape(Shape{m});
      argmax(ctx, fo.logits, best);
      tokens = to_vector<int32_t>(best);
    } else {
      std::vector<SamplingParams> params(static_cast<size_t>(m));
      std::vector<float> u(static_cast<size_t>(m));
      for (int64_t a = 0; a < m; ++a) {
        const ProposeRequest& req = requests[active[static_cast<size_t>(a)]];
        const Row& r = row_ref(req.row);
        params[static_cast<size_t>(a)] = req.sampling;
        // The drafted token's sequence position: history.size() - 1 is the pending token's.
        const uint64_t position = r.history.size() + static_cast<uint64_t>(step);
        u[static_cast<size_t>(a)] =
            philox_uniform(req.seed, position, draft_lane(req.sampling.spec));
      }
      Tensor probs = ensure_rows(step_probs_, DType::f32, m, vocab, ctx.device());
      process_logits(ctx, fo.logits, params, probs);
      Tensor u_t = ensure_rows(uniforms_, DType::f32, m, 1, ctx.device()).reshape(Shape{m});
      ctx.copy_async(u_t.data(), u.data(), u.size() * sizeof(float));
      Tensor tok = ensure_rows(step_tokens_, DType::i32, m, 1, ctx.device()).reshape(Shape{m});
      sample_from_probs(ctx, probs, u_t, tok);
      for (int64_t a = 0; a < m; ++a) {
        const int64_t slot = static_cast<int64_t>(active[static_cast<size_t>(a)]) * max_k + step;
        copy_tensor(q_all.rows(slot, slot + 1), probs.rows(a, a + 1));
      }
      tokens = to_vector<int32_t>(tok);
    }
    for (int64_t a = 0; a < m; ++a) drafts[active[static_cast<size_t>(a)]].push_back(tokens[a]);
  }

  const int64_t base = static_cast<int64_t>(out.tokens.size());
  for (size_t i = 0; i < n; ++i) {
    out.tokens.insert(out.tokens.end(), drafts[i].begin(), drafts[i].end());
    out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
    stats_.n_drafted += static_cast<int64_t>(drafts[i].size());
  }
  if (any_sampled) {
    DSPARK_CHECK(base == 0, "draft model: a sampled proposal must be the only one in `out`");
    const int64_t total = static_cast<int64_t>(out.tokens.size());
    // Compact q rows in proposal order (request i, step j) -> row indptr[i] + j; in place is safe
    // because the destination index never exceeds the source index.
    int64_t dst = 0;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < drafts[i].size(); ++j, ++dst) {
        const int64_t src = static_cast<int64_t>(i) * max_k + static_cast<int64_t>(j);
        if (src != dst) copy_tensor(q_all.rows(dst, dst + 1), q_all.rows(src, src + 1));
      }
    out.q = total > 0 ? q_all.rows(0, total) : Tensor();
  }
  ++stats_.n_propose_calls;
  stats_.propose_ms += ms_since(t0);
}

void DraftModelSource::release(RowId row) {
  auto it = rows_.find(row);
  if (it == rows_.end()) return;
  kv_.release(it->second.seq);
  rows_.erase(it);
}

}  // namespace dspark
