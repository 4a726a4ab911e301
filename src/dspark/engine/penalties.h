// Sampling penalties over a request's history, as the OpenAI API, Hugging Face and vLLM define
// them, turned into the sparse edits of ops/penalties.h:
//   repetition_penalty r (HF / vLLM): every token of the prompt or of the generated text has its
//     logit x replaced by x / r when x > 0, else x * r (r > 1 discourages repeats);
//   presence_penalty p and frequency_penalty f (OpenAI): a token generated c > 0 times so far has
//     f * c + p subtracted (in f32), after the repetition penalty.
// Applied to the raw logits before temperature and the top-k / top-p / min-p cuts (the processed
// distribution of ops/sampling.h is that of the penalized logits). Each logits row sees its own
// history: for a verify row, the prompt, the emitted tokens and the drafts before its position,
// so speculative decoding with penalties emits what plain decoding with penalties emits.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "dspark/backend/op_params.h"

namespace dspark {

struct PenaltyParams {
  float repetition = 1.0f;  // > 0; 1 = off
  float presence = 0.0f;    // [-2, 2]; 0 = off
  float frequency = 0.0f;   // [-2, 2]; 0 = off
  bool active() const { return repetition != 1.0f || presence != 0.0f || frequency != 0.0f; }
};

// Throws invalid_input naming the field.
void validate(const PenaltyParams& params);

// One request's history: the prompt's distinct tokens and the generated tokens' counts.
class PenaltyHistory {
 public:
  PenaltyHistory() = default;
  PenaltyHistory(const PenaltyParams& params, std::span<const int32_t> prompt);
  bool active() const { return params_.active(); }
  void add_generated(int32_t token) {
    if (params_.active()) ++generated_[token];
  }
  // Appends the edits of logits row `row`, whose history is this one followed by `extra`
  // generated tokens (a verify row's drafts before its position). Entries that change nothing
  // are left out; the order is deterministic (ascending token id).
  void append_entries(int32_t row, std::span<const int32_t> extra,
                      std::vector<PenaltyEntry>& out) const;

 private:
  PenaltyParams params_;
  std::vector<int32_t> prompt_;  // distinct prompt tokens, ascending (repetition != 1 only)
  std::unordered_map<int32_t, int32_t> generated_;
  mutable std::vector<std::pair<int32_t, int32_t>> scratch_;  // (token, generated count)
};

}  // namespace dspark
