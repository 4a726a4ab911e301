// Private to the CPU kernels: exp(x) in f32 as Cephes' single-precision polynomial, once portable
// (std::fma) and once 8 at a time for AVX2 + FMA with the same operations in the same order, so
// both give the same bits. Exactly 1 at 0, 0 below -87 (-inf included) and +inf above 88. Within 2
// ulp of std::exp on [-87, 88] (tests/unit/cpu_attention_lanes_test.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dspark::cpu::fast_exp {

// exp(x) = 2^n * exp(r), n = round(x log2 e), r = x - n ln 2 in two parts.
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kMin = -87.0f;  // below: 0 (2^n stays a normal float down to here)
inline constexpr float kMax = 88.0f;   // above: +inf (2^n stays finite up to here)
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// True when exp8 (and the kernels' other AVX2 + FMA paths) run on this CPU.
inline bool has_avx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

inline float exp1(float x) {
  if (!(x >= kMin)) return 0.0f;
  if (x > kMax) return INFINITY;
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  float y = std::fma(p, r * r, r);
  y = y + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  const __m256 zero = _mm256_cmp_ps(x, _mm256_set1_ps(kMin), _CMP_NGE_UQ);
  const __m256 inf = _mm256_cmp_ps(x, _mm256_set1_ps(kMax), _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMin)), _mm256_set1_ps(kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 v = _mm256_andnot_ps(zero, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  return _mm256_blendv_ps(v, _mm256_set1_ps(INFINITY), inf);
}
#endif

}  // namespace dspark::cpu::fast_exp
