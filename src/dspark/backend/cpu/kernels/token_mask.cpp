// CPU kernel of apply_token_mask (contract: ops/token_mask.h): a fully allowed word is skipped.
#include <algorithm>
#include <limits>

#include "dspark/backend/cpu/kernels.h"

namespace dspark::cpu {

void apply_token_mask(Context&, const Tensor& logits, std::span<const int32_t> rows,
                      std::span<const uint32_t> mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t v = logits.size(1);
  const int64_t words = (v + 31) / 32;  // one bit per token
  for (size_t i = 0; i < rows.size(); ++i) {
    float* x = logits.data_as<float>() + rows[i] * logits.stride(0);
    const uint32_t* m = mask.data() + static_cast<int64_t>(i) * words;
    for (int64_t w = 0; w < words; ++w) {
      const uint32_t bits = m[w];
      if (bits == ~uint32_t{0}) continue;
      const int64_t end = std::min<int64_t>(32, v - w * 32);
      for (int64_t b = 0; b < end; ++b)
        if (((bits >> b) & 1u) == 0) x[w * 32 + b] = kNegInf;
    }
  }
}

}  // namespace dspark::cpu
