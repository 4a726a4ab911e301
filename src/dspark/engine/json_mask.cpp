#include "dspark/engine/json_mask.h"

#include <algorithm>
#include <limits>

#include "dspark/core/error.h"

namespace dspark {

void append_json_mask(const JsonConstraint& c, int64_t model_vocab, const JsonMatcher& m,
                      int32_t row, size_t row_begin, std::vector<PenaltyEntry>& out,
                      std::vector<uint8_t>& allowed) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const TokenVocab& vocab = *c.vocab;
  vocab.allowed_tokens(m, allowed);
  for (const int32_t id : c.eos)
    if (id >= 0 && id < vocab.size()) allowed[static_cast<size_t>(id)] = m.complete() ? 1 : 0;
  bool any = false;
  for (const uint8_t a : allowed) any = any || a != 0;
  DSPARK_CHECK(any, "structured output: no token of the vocabulary continues the JSON document");
  // Penalty edits of masked tokens become the mask (each (row, token) once).
  std::vector<int32_t> beyond;  // penalized ids past the tokenizer's vocabulary
  const size_t end = out.size();
  for (size_t i = row_begin; i < end; ++i) {
    if (out[i].token >= vocab.size()) {
      out[i].subtract = kInf;
      beyond.push_back(out[i].token);
      continue;
    }
    auto& a = allowed[static_cast<size_t>(out[i].token)];
    if (a == 0) {
      out[i].subtract = kInf;
      a = 1;
    }
  }
  for (size_t t = 0; t < allowed.size(); ++t)
    if (allowed[t] == 0) out.push_back({row, static_cast<int32_t>(t), 1.0f, kInf});
  for (int64_t t = vocab.size(); t < model_vocab; ++t)
    if (std::find(beyond.begin(), beyond.end(), t) == beyond.end())
      out.push_back({row, static_cast<int32_t>(t), 1.0f, kInf});
}

}  // namespace dspark
