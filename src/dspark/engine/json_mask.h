// Structured output's token masks as sparse logits edits (ops/penalties.h): a token that may not
// follow the matcher's state gets subtract = +inf (its logit becomes -inf), merged with the
// penalty edits of the same logits row so that each (row, token) pair appears once.
#pragma once

#include <cstdint>
#include <vector>

#include "dspark/backend/op_params.h"
#include "dspark/engine/json_matcher.h"

namespace dspark {

// Masks logits row `row` of a [n, model_vocab] batch for the state `m` (EOS allowed exactly when
// the document is complete). The row's penalty edits
// (if any) are out[row_begin, out.size()). `allowed` is scratch. Throws internal when no token
// may follow (a vocabulary without the bytes the document needs).
void append_json_mask(const JsonConstraint& c, int64_t model_vocab, const JsonMatcher& m,
                      int32_t row, size_t row_begin, std::vector<PenaltyEntry>& out,
                      std::vector<uint8_t>& allowed);

}  // namespace dspark
