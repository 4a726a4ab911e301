// Sampling penalties (repetition, presence, frequency) applied to logits rows in place, from a
// sparse list of edits built on the host from each row's history (engine/penalties.h builds it).
// A sparse list keeps the cost proportional to the history, not to rows x vocabulary, and lets
// each row of a verify batch carry its own history (the drafts before its position).
#pragma once

#include <span>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"

namespace dspark {

// For each entry e (PenaltyEntry, backend/op_params.h), in f32 with IEEE rounding (no fused
// multiply-add), on both backends:
//   x = logits[e.row, e.token];
//   if (e.repetition != 1) x = x > 0 ? x / e.repetition : x * e.repetition;
//   logits[e.row, e.token] = x - e.subtract;
// logits: f32 [n, V] on ctx's device (rows contiguous). Entries must name distinct (row, token)
// pairs (the CPU checks it; the kernels assume it); repetition must be > 0 and finite; subtract
// finite, or +inf to mask the token out (structured output: its logit becomes -inf).
void apply_penalties(Context& ctx, const Tensor& logits, std::span<const PenaltyEntry> entries);

}  // namespace dspark
