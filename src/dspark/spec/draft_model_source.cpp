#include "dspark/spec/draft_model_source.h"

#include <algorithm>
#include <chrono>

#include "dspark/core/elapsed.h"

namespace dspark {

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
    // Keep the longest prefix of the draft cache that is still part of the committed text, short
    // of the last token: the next propose feeds at least that one for its logits (the cache may
    // hold all of the text when drafts were cut before verification and the target's token
    // equals the first of them).
    size_t keep = 0;
    const size_t limit =
        std::min(r.kv_tokens.size(), r.history.empty() ? size_t{0} : r.history.size() - 1);
    while (keep < limit && r.kv_tokens[keep] == r.history[keep]) ++keep;
    if (keep < r.kv_tokens.size()) {
      kv_.rollback_to(r.seq, static_cast<int>(keep));
      r.kv_tokens.resize(keep);
    }
  }
  stats_.commit_ms += elapsed_ms(t0);
}

void DraftModelSource::propose(Context& ctx, std::span<const ProposeRequest> requests,
                               Proposal& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = requests.size();
  steps_.begin(ctx, requests, model_->config().vocab_size);
  std::vector<std::vector<int32_t>> drafts(n);
  for (int step = 0; step < steps_.max_steps(); ++step) {
    ForwardBatch batch;
    batch.row_indptr.push_back(0);
    std::vector<size_t> active;
    std::vector<uint64_t> positions;
    for (size_t i = 0; i < n; ++i) {
      if (steps_.drafts(i) <= step) continue;
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
      // The drafted token's sequence position: history.size() - 1 is the pending token's.
      positions.push_back(r.history.size() + static_cast<uint64_t>(step));
    }
    if (active.empty()) break;
    ForwardOutput fo = model_->forward(ctx, kv_, batch);
    const std::vector<int32_t> tokens = steps_.choose(ctx, fo.logits, active, positions, step);
    for (size_t a = 0; a < active.size(); ++a) drafts[active[a]].push_back(tokens[a]);
  }
  steps_.finish(drafts, out);
  stats_.n_drafted += steps_.n_drafted();
  ++stats_.n_propose_calls;
  stats_.propose_ms += elapsed_ms(t0);
}

void DraftModelSource::release(RowId row) {
  auto it = rows_.find(row);
  if (it == rows_.end()) return;
  kv_.release(it->second.seq);
  rows_.erase(it);
}

}  // namespace dspark
