// The target's own next-token prediction layer as a serial draft source (`--draft mtp`;
// model/mtp.h: DeepSeek-V3, GLM-4.5, GLM-5). Its KV cache holds one row per committed target
// position i: the target's hidden state h_i (tap of the last layer, through the target's final
// norm) with the token t_{i+1} that followed it. The row of the last committed position, made with
// the pending token, gives the first draft (the full-prefill convention: the prompt's rows are
// absorbed at the prefill commit, so the first round already drafts); each further draft chains one
// row with the previous row's output h' and the previous draft, at the next position.
//
// Commit: the chained rows are rolled back and the kept tokens' rows absorbed (their taps, each
// with the token after it; a chunk's last position waits for the next chunk's first token).
//
// Deferred commits: after its prompt, a row that drafted nothing in a round (RowUpdate::n_drafted
// == 0; with the adaptive draft policy, a row for which drafting does not pay) is not absorbed
// then: its new rows (h_i, t_{i+1}) wait in the row's stage, and are absorbed in one forward when
// the row is next asked for drafts, before its first draft (that forward also makes the pending
// token's logits). A round where no row drafts then runs neither the layer nor its LM head. A
// commit that would overflow the stage (`deferred_rows` per row) absorbs the staged rows with its
// own, as does a commit whose last position waits for its next token (no pending token).
//
// Prefix reuse (SpecConfig::prefix_cache): row i depends on prompt[0 .. i + 1] (h_i on the
// tokens up to i, and token i + 1), so the layer's full pages are published keyed by the tokens
// after their positions (prompt[1 ..]) under the first prompt token (PagedKvCache's context): a
// prompt of n tokens publishes its rows [0, n - 1), whose next tokens are all in the prompt, and a
// later prompt attaches the rows whose tokens and next tokens it shares.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "dspark/core/buffer.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/mtp.h"
#include "dspark/spec/draft_source.h"
#include "dspark/spec/draft_steps.h"

namespace dspark {

class MtpSource final : public DraftSource {
 public:
  // Rows a row's stage holds (deferred commits, above; 0: every commit is absorbed at once).
  static constexpr int kDeferredRows = 64;
  // `kv_tokens`: capacity of the layer's KV cache in tokens, over all rows.
  MtpSource(std::unique_ptr<MtpLayer> layer, const Model& target, int kv_tokens, int page_size = 16,
            int deferred_rows = kDeferredRows);
  std::string name() const override { return "mtp"; }
  std::vector<int> target_taps() const override { return {target_last_layer_}; }
  void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) override;
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override;
  void release(RowId row) override;
  bool defers_idle_commits() const override { return deferred_rows_ > 0; }
  bool reuses_prefixes() const override { return true; }
  int prefix_page() const override { return kv_.shape().page_size; }
  int attach_prefix(RowId row, std::span<const int32_t> prompt, int max_tokens) override;
  void trim_prefix(RowId row, int n) override;
  void publish_prefix(RowId row, std::span<const int32_t> prompt, int n) override;
  DraftStats stats() const override { return stats_; }
  const MtpLayer& layer() const { return *layer_; }

 private:
  struct Row {
    SeqId seq = -1;
    int absorbed = 0;       // committed positions whose rows the KV cache holds: [0, absorbed)
    bool carry = false;     // position `absorbed` is committed but its next token is not known yet
    bool ready = false;     // logits / hidden hold the row of the last committed position
    OwnedTensor logits;     // f32 [1, vocab]: the first draft's logits
    OwnedTensor hidden;     // [1, hidden]: that row's h' (chained into the second draft)
    OwnedTensor carried;    // [1, hidden]: the carried position's h (target, after the final norm)
    bool prompted = false;  // its prompt is committed (a commit with a pending token was made)
    // Deferred rows: positions [absorbed, absorbed + staged), their h in stage's first rows
    // ([deferred_rows, hidden]) and their next tokens.
    int staged = 0;
    OwnedTensor stage;
    std::vector<int32_t> staged_tokens;
  };
  Row& row_ref(RowId row);
  // Moves the row's staged rows into `dst` (its first r.staged rows) and their tokens onto
  // batch.tokens; returns how many.
  int64_t take_staged(Context& ctx, Row& r, const Tensor& dst, ForwardBatch& batch);
  // One forward over the rows' staged positions, which makes their first draft's logits.
  void absorb_staged(Context& ctx, std::span<Row* const> rows);
  // The layer's forward over `batch` (rows of `hidden_in` with their next tokens); `ready[j]`
  // keeps the logits of logit index j and that row's h' as its first draft's.
  void absorb(Context& ctx, ForwardBatch& batch, const Tensor& hidden_in,
              std::span<Row* const> ready);

  std::unique_ptr<MtpLayer> layer_;
  Tensor target_final_norm_;
  float target_eps_ = 1e-6f;
  int target_last_layer_ = 0;
  int deferred_rows_ = kDeferredRows;
  PagedKvCache kv_;
  std::unordered_map<RowId, Row> rows_;
  DraftSteps steps_;
  OwnedTensor normed_, hidden_in_, step_logits_;
  std::vector<char> defer_;    // commit: which updates are deferred
  std::vector<Row*> resumed_;  // propose: rows that absorb their staged rows first
  DraftStats stats_;
};

}  // namespace dspark
