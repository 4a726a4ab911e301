// Sets which hand-written 16-bit linear kernels are on for one test (the one-row and the few-rows
// kernels, tried before the small-M kernel, and the stream-K kernel, tried after it, before
// cuBLASLt; backend/cuda/kernels.h) and restores the previous switches at the end of the scope.
#pragma once

#include "dspark/backend/cuda/kernels.h"

namespace dspark::test {

class ScopedLinearPaths {
 public:
  ScopedLinearPaths(bool m1, bool rows, bool streamk = false) {
    cuda::set_m1_linear(m1);
    cuda::set_rows_linear(rows);
    cuda::set_streamk_linear(streamk);
  }
  ~ScopedLinearPaths() {
    cuda::set_m1_linear(m1_);
    cuda::set_rows_linear(rows_);
    cuda::set_streamk_linear(streamk_);
  }
  ScopedLinearPaths(const ScopedLinearPaths&) = delete;
  ScopedLinearPaths& operator=(const ScopedLinearPaths&) = delete;

 private:
  const bool m1_ = cuda::m1_linear_enabled(), rows_ = cuda::rows_linear_enabled();
  const bool streamk_ = cuda::streamk_linear_enabled();
};

}  // namespace dspark::test
