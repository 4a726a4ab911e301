// Private to the CPU kernels (and their tests/benchmarks): the small-M f32 matrix product behind
// linear() for decode and verify batches,
//     y[M, N] = x[M, K] . w[N, K]^T (+ bias[N])
// Each weight row is read from memory once per call: threads take blocks of kSmallGemmBlockCols
// weight rows; within a block, each group of 3 weight rows (up to 12 for M <= 4) is used by every
// group of 4 input rows while it is in L1, with MR x NR accumulators of 8 lanes in registers
// (AVX2 + FMA when the CPU has them, chosen at run time; a portable loop otherwise), and the
// weight stream is prefetched into L2 ahead of use (small_m_gemm_avx2.cpp).
//
// Batch invariance: y[r, j] is computed by the same sequence of floating-point operations whatever
// M is, which row of the call r is, and how N is split across threads: 8 partial sums over
// k = l (mod 8), one fused multiply-add (AVX2 path) or multiply then add (portable path) per
// element in increasing k, then the fixed tree ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)), then + bias.
// So row r of an M-row call is bitwise equal to a 1-row call on that row (for a given ISA; the ISA
// is chosen once per process). 16-bit weights are converted to f32 exactly first, so they give the
// same bits as f32 weights holding the same values.
#pragma once

#include <cstdint>
#include <string_view>

#include "dspark/core/dtype.h"

namespace dspark {
class ThreadPool;
}

namespace dspark::cpu {

// linear() routes M <= kSmallGemmMaxRows here (decode, verify and drafter blocks); larger M
// (prefill) goes to OpenBLAS sgemm when it is available. On the SmolLM2-135M projections (2-core
// AMD EPYC) this kernel beats sgemm up to M = 48 and is even at M = 64 (bench_cpu_gemm).
constexpr int64_t kSmallGemmMaxRows = 32;
// Weight rows per block (a multiple of every tile width used by the kernels).
constexpr int64_t kSmallGemmBlockCols = 12;

enum class SmallGemmIsa {
  automatic,  // avx2 when the CPU has AVX2 + FMA + F16C, else portable
  portable,   // plain C++ (baseline SSE2 on x86-64)
  avx2,       // AVX2 + FMA (+ F16C for f16 weights); only when small_gemm_has_avx2()
};

struct SmallGemmArgs {
  const float* x = nullptr;  // [m, k], row stride ldx (>= k)
  int64_t ldx = 0;
  const void* w = nullptr;  // [n, k] contiguous, dtype w_dtype (f32, bf16 or f16)
  DType w_dtype = DType::f32;
  const float* bias = nullptr;  // [n] or null
  void* y = nullptr;            // [m, n], row stride ldy (>= n), dtype y_dtype (f32, bf16 or f16)
  DType y_dtype = DType::f32;
  int64_t ldy = 0;
  int64_t m = 0, n = 0, k = 0;
};

// Runs on `pool` (parallel over blocks of weight rows). y must not overlap x or w.
void small_gemm(ThreadPool& pool, const SmallGemmArgs& args,
                SmallGemmIsa isa = SmallGemmIsa::automatic);

// True when this CPU can run the avx2 path (AVX2, FMA and F16C).
bool small_gemm_has_avx2();
// The ISA `automatic` resolves to on this CPU.
SmallGemmIsa small_gemm_default_isa();
std::string_view small_gemm_isa_name(SmallGemmIsa isa);

}  // namespace dspark::cpu
