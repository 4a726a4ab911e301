// Private to the CPU kernels (and their tests/benchmarks): the product with block-quantized
// weights behind linear() (ops/matmul.h) for a WeightMatrix of WeightFormat::blocks,
//     y[M, N] = x[M, K] . dequantize(w)[N, K]^T (+ bias[N])
// done as llama.cpp does it on the CPU: each row of x is first rounded, per block of 32 values, to
// 8-bit integers with one f32 scale (the "x blocks" below); every weight block is then multiplied
// with them in integers and the block's integer sums are scaled into f32 accumulators.
//
// x blocks: for the 32 values v of block b of a row, amax = max |v|, d = amax / 127,
// q = round-to-nearest-even(v * (127 / amax)), s = d * sum(q) (for the formats with a min); a
// block with amax < 1e-30 rounds to q = 0, d = s = 0, and one with a non-finite value to q = 0,
// d = s = NaN (so NaN in every output of that row).
//
// Block sums (every format; the k-quants Q4_K, Q5_K, Q6_K by units of 32 values: block
// b = 8 * super-block + u): per (x row, weight row) one f32 accumulator, per block b in order
// along k, with i_b the exact int32 sum of its 32 products w_i * q_i (w = q - 8 for Q4_0, q - 16
// for Q5_0, q for Q4_1, Q5_1, Q4_K and Q5_K, the signed byte for Q8_0, the unsigned byte for
// Q8_A (|i_b| <= 32 * 255 * 127 < 2^24), as core/quant.h defines them; Q6_K: w = q - 32 and
// i_b = sc_a * (the sum of products 0..15) + sc_b * (that of 16..31), sc_a / sc_b the int8 scales
// of the unit's two halves, at most 2 * 16 * 32 * 127 * 128 < 2^24 in magnitude):
//     acc = fma(d_w * d_x, float(i_b), acc)   then for Q4_1 / Q5_1 / Q8_A also
//     acc = fma(m_w, s_x, acc)
// (d_w * d_x one f32 multiply, d_w / m_w the block's f16 d / m; Q6_K d_w the super-block's d);
// Q4_K / Q5_K the same with d_w = d * sc_u and m_w = -(dmin * m_u) (both exact in f32: an f16
// times a 6-bit integer); the MLX group types (Q4_A64, Q4_A128, Q8_A64, Q8_A128) by units of 32
// values, each unit as the Q4_1 / Q8_A block that expand_quant_groups makes of it (the group's d
// and m), so their results are those of the expanded blocks bit for bit. y = acc, then + bias[j]
// and the conversion to y's dtype. The SIMD
// kernels run on the 8-row interleaved layout (quant_pack.h): those of quant_gemm_x8.cpp convert
// and scale the sums of 8 weight rows at once.
//
// Batch invariance: that sequence of operations is the same whatever M is, which row of the call
// a row is, and how the weight rows are split among threads, and it is the same on the AVX-512
// VNNI path (vpdpbusd), the AVX2 path (_mm256_maddubs_epi16 / _mm256_madd_epi16 for the integer
// sums, FMA for the f32 part) and the portable one (plain integer loops and std::fma): all give
// the same bits, in either weight layout (the tests check it).
// The cost of keeping that for every M: prefill (M in the hundreds) also runs the integer tiles
// (no sgemm).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "dspark/core/dtype.h"
#include "dspark/core/quant.h"

namespace dspark {
class ThreadPool;
}

namespace dspark::cpu {

enum class QuantGemmIsa {
  automatic,  // avx512 when the CPU has it, else avx2 when it has AVX2 + FMA + F16C, else portable
  portable,   // plain C++
  avx2,       // AVX2 + FMA + F16C; only when quant_gemm_has_avx2()
  avx512,  // avx2 plus AVX-512 F/BW/VL/VNNI for the block sums; only when quant_gemm_has_avx512()
};

struct QuantGemmArgs {
  const void* x = nullptr;  // [m, k] of dtype x_dtype (f32, bf16 or f16), row stride ldx (>= k)
  DType x_dtype = DType::f32;
  int64_t ldx = 0;
  const uint8_t* w = nullptr;  // [n] rows of quant_row_bytes(quant, k) bytes, contiguous
  QuantType quant = QuantType::q8_0;
  bool packed = false;          // w in the interleaved layout of quant_pack.h
  const float* bias = nullptr;  // [n] or null
  void* y = nullptr;            // [m, n], row stride ldy (>= n), dtype y_dtype (f32, bf16 or f16)
  DType y_dtype = DType::f32;
  int64_t ldy = 0;
  int64_t m = 0, n = 0, k = 0;  // k a multiple of the block's values
};

// Runs on `pool` (parallel over blocks of weight rows). y must not overlap x or w.
void quant_gemm(ThreadPool& pool, const QuantGemmArgs& args,
                QuantGemmIsa isa = QuantGemmIsa::automatic);

// One product of a group: y[m, n] = x[m, k] . dequantize(w)[n, k]^T, with the n, k, block type,
// layout, dtypes, strides and bias of the call's shared arguments.
struct QuantGemmProblem {
  const void* x = nullptr;
  const uint8_t* w = nullptr;
  void* y = nullptr;
  int64_t m = 0;
};

// Several products of the same shape and format (a MoE layer's experts, each over its own rows) as
// one call: each gives the bits quant_gemm gives it alone, and the pool takes the blocks of weight
// rows of all of them in one parallel_for, so many small products wait for the threads once.
// shared.x / w / y / m are ignored.
void quant_gemm_grouped(ThreadPool& pool, const QuantGemmArgs& shared,
                        std::span<const QuantGemmProblem> problems,
                        QuantGemmIsa isa = QuantGemmIsa::automatic);

// True when this CPU can run the avx2 path (AVX2, FMA and F16C).
bool quant_gemm_has_avx2();
// True when this CPU can run the avx512 path (the avx2 one plus AVX-512 F, BW, VL and VNNI).
bool quant_gemm_has_avx512();
// The ISA `automatic` resolves to on this CPU.
QuantGemmIsa quant_gemm_default_isa();
std::string_view quant_gemm_isa_name(QuantGemmIsa isa);

}  // namespace dspark::cpu
