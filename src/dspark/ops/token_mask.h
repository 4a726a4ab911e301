// Structured output's token masks applied to logits rows in place: one bit per token, so a row
// costs V / 8 bytes on the host and in the upload whatever the mask allows (a sparse list of
// edits, ops/penalties.h, costs 16 bytes per masked token: most of the vocabulary).
#pragma once

#include <cstdint>
#include <span>

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

// Words of one mask row for a vocabulary of v tokens.
inline int64_t token_mask_words(int64_t v) {
  return (v + 31) / 32;
}

// logits: f32 [n, V] on ctx's device (rows contiguous); rows: logits rows to mask (host, each in
// [0, n)); mask: host u32 [rows.size(), token_mask_words(V)], row i for logits row rows[i]. Token t
// of that row is allowed when bit t % 32 of word t / 32 is set; every other logit becomes -inf
// (allowed logits are left bit for bit). Bits past V are ignored. A row listed twice keeps the
// tokens both masks allow.
void apply_token_mask(Context& ctx, const Tensor& logits, std::span<const int32_t> rows,
                      std::span<const uint32_t> mask);

}  // namespace dspark
