// Pieces of the CUDA linear tests: ScopedLinearPaths sets which hand-written 16-bit linear
// kernels are on for one test (the one-row and the few-rows kernels, tried before the small-M
// kernel, and the stream-K kernel, tried after it, before cuBLASLt; backend/cuda/kernels.h) and
// restores the previous switches at the end of the scope; expect_linear_case compares one linear
// call against the CPU.
#pragma once

#include <string>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"

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

struct LinearCase {
  int64_t m, k, n;
};

inline std::string case_name(const LinearCase& s) {
  return "M=" + std::to_string(s.m) + " N=" + std::to_string(s.n) + " K=" + std::to_string(s.k);
}

// y = x . w^T (+ an f32 bias when with_bias) on the CPU and the GPU from the same rounded inputs
// (x [M, K], w [N, K] with stddev 0.05, the bias: three seeds from `seed`, which advances past
// them), y within its dtype's tolerance (1e-4 relative RMS for f32).
inline void expect_linear_case(Contexts& ctx, DType in, DType out, const LinearCase& s,
                               bool with_bias, uint32_t& seed, const std::string& what) {
  const Pair x = random_pair(in, Shape{s.m, s.k}, seed++);
  const Pair w = random_pair(in, Shape{s.n, s.k}, seed++, 0.05f);
  const Pair bias = random_pair(DType::f32, Shape{s.n}, seed++);
  const Pair y = zeros_pair(out, Shape{s.m, s.n});
  const Tensor no_bias;
  linear(ctx.cpu, x.cpu, w.cpu, with_bias ? bias.cpu.view() : no_bias, y.cpu);
  linear(ctx.gpu, x.gpu, w.gpu, with_bias ? bias.gpu.view() : no_bias, y.gpu);
  ctx.gpu.synchronize();
  expect_close(y.gpu, y.cpu, out == DType::f32 ? 1e-4 : tolerance(out),
               what + " " + name_of(in) + " -> " + name_of(out) + (with_bias ? " + bias " : " ") +
                   case_name(s));
}

}  // namespace dspark::test
