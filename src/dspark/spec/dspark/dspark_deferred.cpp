// The DSpark drafter's deferred context commits (dspark_source.h): the tap rows of a row that is
// not drafting wait in a staging area and are projected, in one pass, when it drafts again.
#include <algorithm>
#include <chrono>
#include <vector>

#include "dspark/core/elapsed.h"
#include "dspark/ops/embedding.h"
#include "dspark/spec/dspark/dspark_source.h"

namespace dspark {

std::vector<Tensor> DSparkSource::stage_taps() const {
  const int64_t h = target_.config().hidden_size;
  std::vector<Tensor> taps;
  for (size_t j = 0; j < config_.target_layer_ids.size(); ++j) {
    const auto c = static_cast<int64_t>(j) * h;
    taps.push_back(stage_->slice(1, c, c + h));
  }
  return taps;
}

void DSparkSource::drop_staged(Row& r, size_t keep) {
  if (r.staged.size() <= keep) return;
  const auto n = static_cast<int64_t>(r.staged.size() - keep);
  r.staged.resize(keep);
  stage_live_ -= n;
  dstats_.n_rows_dropped += n;
  if (stage_live_ == 0) stage_top_ = 0;
}

void DSparkSource::truncate_context(Row& r, int position) {
  const int projected = kv_.length(r.seq);
  if (position >= projected) {
    drop_staged(r, static_cast<size_t>(position - projected));
    return;
  }
  drop_staged(r, 0);
  kv_.rollback_to(r.seq, position);
}

bool DSparkSource::make_stage_room(Context& ctx, int64_t n) {
  const int64_t capacity = options_.deferred_rows;
  if (stage_top_ + n <= capacity) return true;
  // Compacting pays while it frees at least half the stage: each staged row is then moved at most
  // about once before it is projected or dropped (a stage that is mostly live would otherwise be
  // compacted again every few rounds).
  if (2 * (stage_live_ + n) <= capacity) {
    // Move the live rows to the front, in stage order: each moves to a lower or equal row, so
    // none is overwritten before it has moved.
    struct Entry {
      int32_t index;
      int32_t* slot;
    };
    std::vector<Entry> live;
    live.reserve(static_cast<size_t>(stage_live_));
    for (auto& [id, r] : rows_)
      for (int32_t& s : r.staged) live.push_back({s, &s});
    std::sort(live.begin(), live.end(),
              [](const Entry& a, const Entry& b) { return a.index < b.index; });
    const size_t row_bytes = stage_->rows(0, 1).nbytes();
    auto* base = static_cast<char*>(stage_->data());
    for (size_t k = 0; k < live.size();) {
      const auto src = live[k].index, dst = static_cast<int32_t>(k);
      // A run of consecutive rows, cut where it would overlap its destination.
      size_t run = 1;
      while (k + run < live.size() && live[k + run].index == src + static_cast<int32_t>(run) &&
             (src == dst || static_cast<int32_t>(run) < src - dst))
        ++run;
      if (src != dst)
        ctx.copy_async(base + static_cast<size_t>(dst) * row_bytes,
                       base + static_cast<size_t>(src) * row_bytes, run * row_bytes);
      for (size_t j = 0; j < run; ++j) *live[k + j].slot = dst + static_cast<int32_t>(j);
      k += run;
    }
    stage_top_ = stage_live_;
    ++dstats_.n_stage_compactions;
    return true;
  }
  // Mostly live: every staged row is projected now.
  std::vector<Row*> all;
  for (auto& [id, r] : rows_)
    if (!r.staged.empty()) all.push_back(&r);
  flush_staged(ctx, all);
  return n <= capacity;
}

void DSparkSource::stage_context(Context& ctx, std::span<const Deferral> deferrals,
                                 std::span<const Tensor> taps) {
  if (!stage_->defined()) {
    // Mapped lazily in 4 KiB pages on the CPU (Buffer::zeros), not in the 2 MiB pages of an
    // uninitialised tensor this size: the rounds that stage rows fault the stage in, and a fault
    // stalls every row of its round. Where a virtual machine's host backs memory lazily, a fresh
    // 2 MiB page costs ~10 ms per MiB at its first touch, a 4 KiB page ~0.5 ms per MiB.
    const int64_t width =
        static_cast<int64_t>(config_.target_layer_ids.size()) * target_.config().hidden_size;
    const Shape shape{options_.deferred_rows, width};
    const Device device = target_.device();
    stage_ = device.is_cpu() ? OwnedTensor::zeros(dtype_, shape, device)
                             : OwnedTensor(dtype_, shape, device);
  }
  std::vector<int32_t> rows;
  for (const Deferral& d : deferrals) {
    const auto n = static_cast<int32_t>(d.update->kept_tokens.size());
    for (int32_t j = 0; j < n; ++j) {
      rows.push_back(d.update->tap_offset + j);
      d.row->staged.push_back(static_cast<int32_t>(stage_top_) + static_cast<int32_t>(j));
    }
    stage_top_ += n;
  }
  const auto n = static_cast<int64_t>(rows.size());
  stage_meta_.clear();
  const int slot = stage_meta_.add(rows);
  stage_meta_.upload(ctx);
  const std::vector<Tensor> columns = stage_taps();
  for (size_t j = 0; j < taps.size(); ++j)
    gather_rows(ctx, taps[j], stage_meta_.view(slot), columns[j].rows(stage_top_ - n, stage_top_));
  stage_live_ += n;
  dstats_.n_rows_staged += n;
}

void DSparkSource::flush_staged(Context& ctx, std::span<Row* const> rows) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Tensor> taps = stage_taps();
  std::vector<SeqId> seqs;
  std::vector<int> n_new;
  std::vector<int32_t> tap_rows, positions;
  int64_t flushed = 0;
  auto project = [&] {
    if (tap_rows.empty()) return;
    project_context(ctx, seqs, n_new, tap_rows, positions, taps);
    flushed += static_cast<int64_t>(tap_rows.size());
    seqs.clear();
    n_new.clear();
    tap_rows.clear();
    positions.clear();
  };
  for (Row* r : rows) {
    const int len = kv_.length(r->seq);
    for (size_t j = 0; j < r->staged.size(); ++j) {
      if (static_cast<int64_t>(tap_rows.size()) == kDeferredChunkRows) project();
      if (seqs.empty() || seqs.back() != r->seq) {
        seqs.push_back(r->seq);
        n_new.push_back(0);
      }
      ++n_new.back();
      tap_rows.push_back(r->staged[j]);
      positions.push_back(len + static_cast<int32_t>(j));
    }
    stage_live_ -= static_cast<int64_t>(r->staged.size());
    r->staged.clear();
  }
  project();
  if (stage_live_ == 0) stage_top_ = 0;
  dstats_.n_rows_projected += flushed;
  if (flushed > 0) ++dstats_.n_stage_flushes;
  stats_.catch_up_ms += elapsed_ms(t0);
}

}  // namespace dspark
