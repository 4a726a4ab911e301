// Private to the CPU attention kernel (attention.cpp): the arithmetic of one lane (one query of
// one head) against a chunk of keys. Every function exists twice, AVX2 + FMA and portable
// (std::fma), with the same operations in the same order, so both give the same bits; and a
// lane's results depend on its own query and keys only, so a verify's queries equal the same
// queries decoded one at a time, bit for bit.
//   score of key j: lane l of 8 sums the products of dims i = l (mod 8) in increasing i with
//     fma, then ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)).
//   exp: fast_exp.h (exactly 0 below -87 and 1 at 0; attention takes it on [-inf, 0] only).
//   weights of a chunk: exp(s - max) in groups of 8 keys, summed per lane of 8 over the groups
//     in order, then the tree above.
//   output: acc[i] = fma(w_j, v_j[i], acc[i]) over the lane's visible keys in increasing j.
//   fold of a key segment's output into the running one: o[i] = fma(acc[i], b, o[i] * a).
#pragma once

#include <cstdint>

namespace dspark::cpu::attention_lanes {

// True when the AVX2 + FMA versions run on this CPU.
bool has_avx2();

// exp(x) as the kernels compute it (fast_exp::exp1).
float exp_lane(float x);

// s[jj] = score of q (d values) against keys[jj], jj < c.
void scores(bool avx2, const float* q, int64_t d, const float* const* keys, int64_t c, float* s);

// The largest of s[0 .. n) (n a multiple of 8), NaNs ignored; -inf when there is none. Which of
// +0 and -0 it returns for a maximum of zero may differ between the versions; the kernel's
// results do not depend on it (x - 0 and x + 0 and exp(+-0) agree).
float max_of(bool avx2, const float* s, int64_t n);

// s[jj] = exp_lane(s[jj] - shift) for jj < n (n a multiple of 8); returns their sum (see above).
float exp_shifted(bool avx2, float* s, int64_t n, float shift);

// acc[i] = fma(w[jj], values[jj][i], acc[i]) for jj in [j0, j1), i < d.
void accumulate(bool avx2, const float* w, const float* const* values, int64_t j0, int64_t j1,
                float* acc, int64_t d);

// o[i] = fma(acc[i], b, o[i] * a) for i < d: a segment's output folded into the running one.
void fold(bool avx2, const float* acc, float a, float b, float* o, int64_t d);

}  // namespace dspark::cpu::attention_lanes
