// One attention lane's arithmetic, AVX2 + FMA and portable (attention_lanes.h states the order of
// operations both follow). The AVX2 versions take head dims that are multiples of 8; others run
// the portable code, which gives the same bits.
#include "dspark/backend/cpu/kernels/attention_lanes.h"

#include "dspark/backend/cpu/kernels/fast_exp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dspark::cpu::attention_lanes {
namespace {

float tree8(const float* x) {
  return ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
}

float score_portable(const float* q, const float* k, int64_t d) {
  float s[8] = {};
  for (int64_t i = 0; i < d; ++i) s[i % 8] = std::fma(q[i], k[i], s[i % 8]);
  return tree8(s);
}

#if defined(__x86_64__)
#define LANES_AVX2 __attribute__((target("avx2,fma")))

// The 8 lanes of each of a[0..7] summed by the tree, as one vector (element j: a[j]'s sum).
LANES_AVX2 inline __m256 tree8_x8(const __m256 (&a)[8]) {
  // hadd pairs neighbours: t0 = [a0 01, a0 23, a1 01, a1 23 | a0 45, a0 67, a1 45, a1 67].
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  // u0 = [a0..a3 (01 + 23) | a0..a3 (45 + 67)], u1 the same of a4..a7.
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

LANES_AVX2 inline float tree8_one(__m256 v) {
  alignas(32) float x[8];
  _mm256_store_ps(x, v);
  return tree8(x);
}

LANES_AVX2 void scores_avx2(const float* q, int64_t d, const float* const* keys, int64_t c,
                            float* s) {
  for (int64_t k0 = 0; k0 < c; k0 += 8) {
    const float* kr[8];
    for (int64_t j = 0; j < 8; ++j) kr[j] = keys[std::min(k0 + j, c - 1)];
    __m256 a[8];
    for (auto& v : a) v = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr[j] + i), a[j]);
    }
    const __m256 sums = tree8_x8(a);
    if (c - k0 >= 8) {
      _mm256_storeu_ps(s + k0, sums);
    } else {
      alignas(32) float x[8];
      _mm256_store_ps(x, sums);
      std::memcpy(s + k0, x, static_cast<size_t>(c - k0) * sizeof(float));
    }
  }
}

LANES_AVX2 float max_of_avx2(const float* s, int64_t n) {
  // max_ps returns its second operand where either is NaN: a NaN score leaves the maximum as is.
  __m256 m = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(s + j), m);
  alignas(32) float x[8];
  _mm256_store_ps(x, m);
  float r = -INFINITY;
  for (float v : x) r = std::max(r, v);
  return r;
}

LANES_AVX2 float exp_shifted_avx2(float* s, int64_t n, float shift) {
  __m256 sum = _mm256_setzero_ps();
  const __m256 sh = _mm256_set1_ps(shift);
  for (int64_t j = 0; j < n; j += 8) {
    const __m256 w = fast_exp::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), sh));
    _mm256_storeu_ps(s + j, w);
    sum = _mm256_add_ps(sum, w);
  }
  return tree8_one(sum);
}

// Output dims [i0, i0 + 8 * NV) held in NV registers over the keys.
template <int NV>
LANES_AVX2 inline void accumulate_avx2_block(const float* w, const float* const* values, int64_t j0,
                                             int64_t j1, int64_t i0, float* acc) {
  __m256 r[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) r[v] = _mm256_loadu_ps(acc + i0 + 8 * v);
  for (int64_t j = j0; j < j1; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const float* vj = values[j] + i0;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) r[v] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 8 * v), r[v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) _mm256_storeu_ps(acc + i0 + 8 * v, r[v]);
}

LANES_AVX2 void accumulate_avx2(const float* w, const float* const* values, int64_t j0, int64_t j1,
                                float* acc, int64_t d) {
  int64_t i0 = 0;
  for (; i0 + 64 <= d; i0 += 64) accumulate_avx2_block<8>(w, values, j0, j1, i0, acc);
  for (; i0 < d; i0 += 8) accumulate_avx2_block<1>(w, values, j0, j1, i0, acc);
}

// exp1 inlined where FMA and SSE4.1 are enabled: its fma and rounding become instructions instead
// of calls into libm (the same operations, the same bits).
LANES_AVX2 float exp1_avx2(float x) {
  return fast_exp::exp1(x);
}

LANES_AVX2 void fold_avx2(const float* acc, float a, float b, float* o, int64_t d) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  for (int64_t i = 0; i < d; i += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(o + i), va);
    _mm256_storeu_ps(o + i, _mm256_fmadd_ps(_mm256_loadu_ps(acc + i), vb, scaled));
  }
}
#endif  // __x86_64__

}  // namespace

bool has_avx2() {
  return fast_exp::has_avx2();
}

float exp_lane(float x) {
#if defined(__x86_64__)
  if (has_avx2()) return exp1_avx2(x);
#endif
  return fast_exp::exp1(x);
}

void scores(bool avx2, const float* q, int64_t d, const float* const* keys, int64_t c, float* s) {
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0) return scores_avx2(q, d, keys, c, s);
#endif
  (void)avx2;
  for (int64_t j = 0; j < c; ++j) s[j] = score_portable(q, keys[j], d);
}

float max_of(bool avx2, const float* s, int64_t n) {
#if defined(__x86_64__)
  if (avx2) return max_of_avx2(s, n);
#endif
  (void)avx2;
  float r = -INFINITY;
  for (int64_t j = 0; j < n; ++j) r = std::max(r, s[j]);
  return r;
}

float exp_shifted(bool avx2, float* s, int64_t n, float shift) {
#if defined(__x86_64__)
  if (avx2) return exp_shifted_avx2(s, n, shift);
#endif
  (void)avx2;
  float sum[8] = {};
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_lane(s[j] - shift);
    sum[j % 8] += s[j];
  }
  return tree8(sum);
}

void accumulate(bool avx2, const float* w, const float* const* values, int64_t j0, int64_t j1,
                float* acc, int64_t d) {
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0) return accumulate_avx2(w, values, j0, j1, acc, d);
#endif
  (void)avx2;
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t i = 0; i < d; ++i) acc[i] = std::fma(w[j], values[j][i], acc[i]);
}

void fold(bool avx2, const float* acc, float a, float b, float* o, int64_t d) {
#if defined(__x86_64__)
  if (avx2 && d % 8 == 0) return fold_avx2(acc, a, b, o, d);
#endif
  (void)avx2;
  for (int64_t i = 0; i < d; ++i) o[i] = std::fma(acc[i], b, o[i] * a);
}

}  // namespace dspark::cpu::attention_lanes
