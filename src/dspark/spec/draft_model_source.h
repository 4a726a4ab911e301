// An independent draft model (a smaller checkpoint sharing the target's tokenizer) with its own
// paged KV cache: each round it catches up on the tokens it has not processed (at least the
// pending token), then proposes autoregressively, one batched forward per draft position. After
// verification its cache is rolled back to the longest prefix it shares with the committed text.
// Under a request's grammar (structured output) each position's choice is masked
// (spec/draft_steps.h).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "dspark/core/buffer.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_source.h"
#include "dspark/spec/draft_steps.h"

namespace dspark {

class DraftModelSource final : public DraftSource {
 public:
  // `kv_tokens`: capacity of the draft model's KV cache in tokens, over all rows.
  DraftModelSource(std::unique_ptr<Model> model, int kv_tokens, int page_size = 16);
  std::string name() const override { return "model"; }
  void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) override;
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override;
  void release(RowId row) override;
  DraftStats stats() const override { return stats_; }
  const Model& model() const { return *model_; }

 private:
  struct Row {
    SeqId seq = -1;
    std::vector<int32_t> history;    // committed tokens + pending
    std::vector<int32_t> kv_tokens;  // tokens held in the draft KV cache, in order
  };
  Row& row_ref(RowId row);

  std::unique_ptr<Model> model_;
  PagedKvCache kv_;
  std::unordered_map<RowId, Row> rows_;
  DraftSteps steps_;
  DraftStats stats_;
};

}  // namespace dspark
