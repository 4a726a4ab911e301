// Sets which hand-written 16-bit linear kernels are on for one test (the one-row and the few-rows
// kernels, tried before the small-M kernel and cuBLASLt; backend/cuda/kernels.h) and restores the
// previous switches at the end of the scope.
#pragma once

#include "dspark/backend/cuda/kernels.h"

namespace dspark::test {

class ScopedLinearPaths {
 public:
  ScopedLinearPaths(bool m1, bool rows) {
    cuda::set_m1_linear(m1);
    cuda::set_rows_linear(rows);
  }
  ~ScopedLinearPaths() {
    cuda::set_m1_linear(m1_);
    cuda::set_rows_linear(rows_);
  }
  ScopedLinearPaths(const ScopedLinearPaths&) = delete;
  ScopedLinearPaths& operator=(const ScopedLinearPaths&) = delete;

 private:
  const bool m1_ = cuda::m1_linear_enabled(), rows_ = cuda::rows_linear_enabled();
};

}  // namespace dspark::test
