#include "dspark/spec/mtp_source.h"

#include <algorithm>
#include <chrono>

#include "dspark/core/elapsed.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/norm.h"

namespace dspark {

MtpSource::MtpSource(std::unique_ptr<MtpLayer> layer, const Model& target, int kv_tokens,
                     int page_size, int deferred_rows)
    : layer_(std::move(layer)),
      target_final_norm_(target.final_norm()),
      target_eps_(static_cast<float>(target.config().rms_norm_eps)),
      target_last_layer_(target.config().num_layers - 1),
      deferred_rows_(std::max(0, deferred_rows)),
      kv_(layer_->kv_shape(page_size, (kv_tokens + page_size - 1) / page_size + 1),
          layer_->device()) {
  DSPARK_CHECK_KIND(
      invalid_input,
      layer_->hidden_size() == target.config().hidden_size &&
          layer_->vocab_size() == target.config().vocab_size && layer_->device() == target.device(),
      "MTP layer (hidden {}, vocab {}, {}) does not fit the target (hidden {}, "
      "vocab {}, {})",
      layer_->hidden_size(), layer_->vocab_size(), layer_->device().name(),
      target.config().hidden_size, target.config().vocab_size, target.device().name());
}

MtpSource::Row& MtpSource::row_ref(RowId row) {
  auto it = rows_.find(row);
  DSPARK_CHECK(it != rows_.end(), "mtp: unknown row {}", row);
  return it->second;
}

void MtpSource::begin(Context&, RowId row, std::span<const int32_t>) {
  Row r;
  r.seq = kv_.create_sequence();
  const Device d = layer_->device();
  const int64_t h = layer_->hidden_size();
  r.logits = OwnedTensor(DType::f32, Shape{1, int64_t{layer_->vocab_size()}}, d);
  r.hidden = OwnedTensor(layer_->activation_dtype(), Shape{1, h}, d);
  r.carried = OwnedTensor(layer_->activation_dtype(), Shape{1, h}, d);
  // Made here, with the row's other buffers: a commit never allocates.
  if (deferred_rows_ > 0)
    r.stage = OwnedTensor(layer_->activation_dtype(), Shape{int64_t{deferred_rows_}, h}, d);
  r.staged_tokens.reserve(static_cast<size_t>(deferred_rows_));
  rows_[row] = std::move(r);
}

void MtpSource::commit(Context& ctx, std::span<const RowUpdate> updates,
                       std::span<const Tensor> taps) {
  const auto t0 = std::chrono::steady_clock::now();
  if (updates.empty()) return;
  DSPARK_CHECK(taps.size() == 1, "mtp: commit expects the target's last-layer tap, got {} taps",
               taps.size());
  const Tensor& tap = taps[0];
  const int64_t h = layer_->hidden_size();
  const DType dt = layer_->activation_dtype();
  // The target's hidden states after its final norm: what its LM head reads, the MTP's h_i.
  const Tensor normed = ensure_rows(normed_, dt, tap.size(0), h, ctx.device());
  rms_norm(ctx, tap, target_final_norm_, normed, RmsNormParams{target_eps_, false});

  // Rows of position i: (h_i, t_{i+1}). A carried position continues with the first kept token;
  // the update's own rows are its kept tokens after the first, then the pending token.
  auto own_rows = [](const RowUpdate& u) {
    return static_cast<int64_t>(u.kept_tokens.size()) - 1 + (u.pending >= 0 ? 1 : 0);
  };
  std::vector<char>& defer = defer_;
  defer.assign(updates.size(), 0);
  int64_t total = 0;
  for (size_t i = 0; i < updates.size(); ++i) {
    const RowUpdate& u = updates[i];
    const Row& r = row_ref(u.row);
    DSPARK_CHECK(!u.kept_tokens.empty(), "mtp: row {} commits no tokens", u.row);
    DSPARK_CHECK(u.first_position == r.absorbed + r.staged + (r.carry ? 1 : 0),
                 "mtp: row {} commits position {} but holds {} positions", u.row, u.first_position,
                 r.absorbed + r.staged + (r.carry ? 1 : 0));
    defer[i] = deferred_rows_ > 0 && r.prompted && u.n_drafted == 0 && !r.carry && u.pending >= 0 &&
               r.staged + own_rows(u) <= deferred_rows_;
    if (!defer[i]) total += r.staged + (r.carry ? 1 : 0) + own_rows(u);
  }
  const Tensor hidden_in =
      ensure_rows(hidden_in_, dt, std::max<int64_t>(total, 1), h, ctx.device());
  ForwardBatch batch;
  batch.row_indptr.push_back(0);
  std::vector<Row*> ready;
  int64_t k = 0;
  for (size_t i = 0; i < updates.size(); ++i) {
    const RowUpdate& u = updates[i];
    Row& r = row_ref(u.row);
    kv_.rollback_to(r.seq, r.absorbed);  // the chained rows of the last proposal
    r.ready = false;
    r.prompted = r.prompted || u.pending >= 0;
    const int64_t own = own_rows(u);
    if (defer[i]) {
      convert(ctx, normed.rows(u.tap_offset, u.tap_offset + own),
              r.stage.view().rows(r.staged, r.staged + own));
      r.staged_tokens.insert(r.staged_tokens.end(), u.kept_tokens.begin() + 1, u.kept_tokens.end());
      r.staged_tokens.push_back(u.pending);
      r.staged += static_cast<int>(own);
      continue;
    }
    const int64_t begin = k;
    k += take_staged(ctx, r, hidden_in.rows(k, k + r.staged), batch);
    if (r.carry) {
      convert(ctx, r.carried.view(), hidden_in.rows(k, k + 1));
      batch.tokens.push_back(u.kept_tokens[0]);
      ++k;
    }
    if (own > 0) {
      convert(ctx, normed.rows(u.tap_offset, u.tap_offset + own), hidden_in.rows(k, k + own));
      batch.tokens.insert(batch.tokens.end(), u.kept_tokens.begin() + 1, u.kept_tokens.end());
      if (u.pending >= 0) batch.tokens.push_back(u.pending);
      k += own;
    }
    r.carry = u.pending < 0;
    if (r.carry) {
      const int64_t last = u.tap_offset + static_cast<int64_t>(u.kept_tokens.size()) - 1;
      convert(ctx, normed.rows(last, last + 1), r.carried.view());
    }
    if (k == begin) continue;
    r.absorbed += static_cast<int>(k - begin);
    batch.row_indptr.push_back(static_cast<int32_t>(k));
    batch.seqs.push_back(r.seq);
    if (u.pending >= 0) {
      batch.logit_indices.push_back(static_cast<int32_t>(k) - 1);
      ready.push_back(&r);
    }
  }
  if (k > 0) absorb(ctx, batch, hidden_in.rows(0, k), ready);
  stats_.commit_ms += elapsed_ms(t0);
}

void MtpSource::absorb_staged(Context& ctx, std::span<Row* const> rows) {
  if (rows.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t h = layer_->hidden_size();
  int64_t total = 0;
  for (const Row* r : rows) total += r->staged;
  const Tensor hidden_in =
      ensure_rows(hidden_in_, layer_->activation_dtype(), total, h, ctx.device());
  ForwardBatch batch;
  batch.row_indptr.push_back(0);
  int64_t k = 0;
  for (Row* r : rows) {
    const int64_t n = take_staged(ctx, *r, hidden_in.rows(k, k + r->staged), batch);
    k += n;
    r->absorbed += static_cast<int>(n);
    batch.row_indptr.push_back(static_cast<int32_t>(k));
    batch.seqs.push_back(r->seq);
    batch.logit_indices.push_back(static_cast<int32_t>(k) - 1);
  }
  absorb(ctx, batch, hidden_in.rows(0, k), rows);
  stats_.catch_up_ms += elapsed_ms(t0);
}

int64_t MtpSource::take_staged(Context& ctx, Row& r, const Tensor& dst, ForwardBatch& batch) {
  const int64_t n = r.staged;
  if (n == 0) return 0;
  convert(ctx, r.stage.view().rows(0, n), dst);
  batch.tokens.insert(batch.tokens.end(), r.staged_tokens.begin(), r.staged_tokens.end());
  r.staged = 0;
  r.staged_tokens.clear();
  return n;
}

void MtpSource::absorb(Context& ctx, ForwardBatch& batch, const Tensor& hidden_in,
                       std::span<Row* const> ready) {
  const ForwardOutput fo = layer_->forward(ctx, kv_, batch, hidden_in);
  for (size_t j = 0; j < ready.size(); ++j) {
    const auto lj = static_cast<int64_t>(j);
    const int64_t row = batch.logit_indices[j];
    convert(ctx, fo.logits.rows(lj, lj + 1), ready[j]->logits.view());
    convert(ctx, fo.final_hidden.rows(row, row + 1), ready[j]->hidden.view());
    ready[j]->ready = true;
  }
}

void MtpSource::propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = requests.size();
  const int64_t vocab = layer_->vocab_size(), h = layer_->hidden_size();
  const DType dt = layer_->activation_dtype();
  // Rows asked for drafts absorb their deferred rows first (their first draft's logits).
  std::vector<Row*>& resumed = resumed_;
  resumed.clear();
  for (const ProposeRequest& q : requests) {
    Row& r = row_ref(q.row);
    if (q.max_tokens > 0 && r.staged > 0) resumed.push_back(&r);
  }
  absorb_staged(ctx, resumed);
  steps_.begin(ctx, requests, vocab);
  std::vector<std::vector<int32_t>> drafts(n);
  ForwardOutput prev;  // the last chained forward: row a of it is active[a]'s
  std::vector<size_t> prev_active;
  for (int step = 0; step < steps_.max_steps(); ++step) {
    std::vector<size_t> active;
    std::vector<uint64_t> positions;
    for (size_t i = 0; i < n; ++i) {
      const Row& r = row_ref(requests[i].row);
      if (steps_.drafts(i) <= step || !r.ready || drafts[i].size() != static_cast<size_t>(step))
        continue;
      active.push_back(i);
      // The pending token is at position `absorbed`; draft step s at absorbed + 1 + s.
      positions.push_back(static_cast<uint64_t>(r.absorbed) + 1 + static_cast<uint64_t>(step));
    }
    if (active.empty()) break;
    const auto m = static_cast<int64_t>(active.size());
    Tensor logits;
    if (step == 0) {  // the logits the commit made with the pending token
      logits = ensure_rows(step_logits_, DType::f32, m, vocab, ctx.device());
      for (int64_t a = 0; a < m; ++a)
        convert(ctx, row_ref(requests[active[static_cast<size_t>(a)]].row).logits.view(),
                logits.rows(a, a + 1));
    } else {  // one chained row per active request: (h' of its previous row, its last draft)
      const Tensor hidden_in = ensure_rows(hidden_in_, dt, m, h, ctx.device());
      ForwardBatch batch;
      batch.row_indptr.push_back(0);
      size_t p = 0;
      for (int64_t a = 0; a < m; ++a) {
        const size_t i = active[static_cast<size_t>(a)];
        Row& r = row_ref(requests[i].row);
        if (step == 1) {
          convert(ctx, r.hidden.view(), hidden_in.rows(a, a + 1));
        } else {
          while (prev_active[p] != i) ++p;  // active is a subsequence of prev_active
          const auto pr = static_cast<int64_t>(p);
          convert(ctx, prev.final_hidden.rows(pr, pr + 1), hidden_in.rows(a, a + 1));
        }
        batch.tokens.push_back(drafts[i].back());
        batch.row_indptr.push_back(static_cast<int32_t>(a + 1));
        batch.logit_indices.push_back(static_cast<int32_t>(a));
        batch.seqs.push_back(r.seq);
      }
      prev = layer_->forward(ctx, kv_, batch, hidden_in.rows(0, m));
      prev_active = active;
      logits = prev.logits;
    }
    const std::vector<int32_t> tokens = steps_.choose(ctx, logits, active, positions, step);
    for (size_t a = 0; a < active.size(); ++a) drafts[active[a]].push_back(tokens[a]);
  }
  steps_.finish(drafts, out);
  stats_.n_drafted += steps_.n_drafted();
  ++stats_.n_propose_calls;
  stats_.propose_ms += elapsed_ms(t0);
}

int MtpSource::attach_prefix(RowId row, std::span<const int32_t> prompt, int max_tokens) {
  Row& r = row_ref(row);
  DSPARK_CHECK(r.absorbed == 0 && !r.carry, "mtp: attach_prefix on row {} after a commit", row);
  if (prompt.size() < 2) return 0;
  r.absorbed = kv_.attach_prefix(r.seq, prompt.subspan(1), max_tokens, prompt[0]);
  return r.absorbed;
}

void MtpSource::trim_prefix(RowId row, int n) {
  Row& r = row_ref(row);
  DSPARK_CHECK(n >= 0 && n <= r.absorbed && !r.carry, "mtp: trim_prefix({}) of row {} holding {}",
               n, row, r.absorbed);
  kv_.rollback_to(r.seq, n);
  r.absorbed = n;
}

void MtpSource::publish_prefix(RowId row, std::span<const int32_t> prompt, int n) {
  const Row& r = row_ref(row);
  // Row n - 1 was made with the first generated token, not a prompt token.
  const int rows = std::min(n - 1, r.absorbed);
  if (rows <= 0) return;
  kv_.publish_prefix(r.seq, prompt.subspan(1), rows, prompt[0]);
}

void MtpSource::release(RowId row) {
  auto it = rows_.find(row);
  if (it == rows_.end()) return;
  kv_.release(it->second.seq);
  rows_.erase(it);
}

}  // namespace dspark
