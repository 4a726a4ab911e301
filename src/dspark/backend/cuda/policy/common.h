// Small helpers shared by the kernel choices (policy/*.cpp). Host-only, like the rest of policy/.
#pragma once

#include <cstdint>

#include "dspark/core/dtype.h"

namespace dspark::cuda::policy_detail {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

inline bool is_16bit(DType d) {
  return d == DType::bf16 || d == DType::f16;
}

}  // namespace dspark::cuda::policy_detail
