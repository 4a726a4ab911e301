// The x rows' rounding to 8-bit blocks (quant_gemm.h) with AVX2 + FMA + F16C, for the SIMD
// kernels of the product (quant_gemm_x8.cpp). The library is built for baseline x86-64, so the
// function carries __attribute__((target(...))) and is only called after quant_gemm_has_avx2()
// said yes.
#include "dspark/backend/cpu/kernels/quant_gemm_detail.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cmath>
#include <cstring>

#define DSPARK_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace dspark::cpu::quant_gemm_detail {

// quantize_x_row's arithmetic (quant_gemm.cpp) 8 lanes at a time: the same IEEE operations
// (max of magnitudes, one division, one multiply per value, round to nearest even), so the same
// bytes and scales.
DSPARK_AVX2 void quantize_x_row_avx2(const float* v, int64_t k, uint8_t* dst) {
  const int64_t nb = k / 32;
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + k);
  float* s = d + nb;
  auto* isum = reinterpret_cast<int32_t*>(d + 2 * nb);
  const __m256 sign = _mm256_set1_ps(-0.0f), fmax = _mm256_set1_ps(3.402823466e38f);
  for (int64_t b = 0; b < nb; ++b) {
    __m256 x[4], a[4];
    int finite = 0xFF;
    for (int i = 0; i < 4; ++i) {
      x[i] = _mm256_loadu_ps(v + 32 * b + 8 * i);
      a[i] = _mm256_andnot_ps(sign, x[i]);
      finite &= _mm256_movemask_ps(_mm256_cmp_ps(a[i], fmax, _CMP_LE_OQ));
    }
    const __m256 m8 = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    alignas(32) int8_t bytes[32];
    if (finite != 0xFF || amax < kTinyXBlock) {
      std::memset(bytes, 0, 32);
      d[b] = s[b] = finite == 0xFF ? 0.0f : std::nanf("");
      isum[b] = isum[nb + b] = 0;
    } else {
      const __m256 inv = _mm256_set1_ps(127.0f / amax);
      __m256i qi[4];
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        qi[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(x[i], inv),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum = _mm256_add_epi32(sum, qi[i]);
      }
      // packs interleave the 128-bit halves: 4-byte groups come out in order 0 2 4 6 1 3 5 7.
      const __m256i p16 =
          _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
      _mm256_store_si256(
          reinterpret_cast<__m256i*>(bytes),
          _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
      // sum16: values 0..15 (qi[0], qi[1]); then all 32.
      const __m256i first = _mm256_add_epi32(qi[0], qi[1]);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(first), _mm256_extracti128_si256(first, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      isum[nb + b] = _mm_cvtsi128_si32(s4);
      s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      d[b] = amax / 127.0f;
      s[b] = d[b] * static_cast<float>(_mm_cvtsi128_si32(s4));
      isum[b] = _mm_cvtsi128_si32(s4);
    }
    std::memcpy(q + 32 * b, bytes, 32);
  }
}

}  // namespace dspark::cpu::quant_gemm_detail

#endif  // __x86_64__
