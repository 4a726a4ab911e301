// AVX2 + FMA tiles of the small-M product (small_m_gemm.h). The library is built for baseline
// x86-64, so every function here carries __attribute__((target(...))) and is only called after
// small_gemm_has_avx2() said yes.
//
// A tile is MR input rows x NR weight rows; it keeps MR * NR accumulators of 8 lanes in registers
// (12 of the 16 ymm registers), loads NR weight vectors and one input vector at a time, and does
// MR * NR fused multiply-adds per 8 elements of k. The k tail (k % 8) goes through masked loads
// into the same accumulators, so every (row, column) sees the same operation sequence whatever the
// tile shape: the results do not depend on M.
//
// Memory: a decode/verify step streams every weight from DRAM once. Without help, a tile with
// several input rows stalls on those loads and the memory time and the FMA time add up; a
// software prefetch into L2 of the bytes the driver names (16 KiB ahead of the f32 rows being
// read, or the next block of a 16-bit weight), paced with the FMAs, makes them overlap (measured
// on a 2-core AMD EPYC VM: the SmolLM2-135M projections at M = 8 went from 2.1x to 1.1-1.3x the
// time of M = 1). _MM_HINT_T1 was clearly better than T0 and NTA there.
#include "dspark/backend/cpu/kernels/small_m_gemm_tiles.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>

#include "dspark/backend/cpu/kernels/small_m_gemm.h"

#define DSPARK_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace dspark::cpu::small_gemm_detail {
namespace {

// Full sums of four 8-lane accumulators, lane i of the result = ((a0+a1)+(a2+a3)) +
// ((a4+a5)+(a6+a7)) of accumulator i (the order documented in small_m_gemm.h).
DSPARK_AVX2 inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  // hadd(a0, a1) = [a0 01, a0 23, a1 01, a1 23 | a0 45, a0 67, a1 45, a1 67]
  const __m256 h01 = _mm256_hadd_ps(a0, a1);
  const __m256 h23 = _mm256_hadd_ps(a2, a3);
  // [a0 0123, a1 0123, a2 0123, a3 0123 | a0 4567, a1 4567, a2 4567, a3 4567]
  const __m256 h = _mm256_hadd_ps(h01, h23);
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

DSPARK_AVX2 inline __m256i tail_mask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// A byte range fetched into L2, bytes_per_step more per 8 elements of k.
struct Prefetch {
  const char* next = nullptr;  // null: none
  int64_t bytes_per_step = 0;
};

DSPARK_AVX2 inline void prefetch_step(Prefetch& pf, const char*& goal) {
  goal += pf.bytes_per_step;
  for (; pf.next < goal; pf.next += 64) _mm_prefetch(pf.next, _MM_HINT_T1);
}

// out[r * kCols + j] for r < MR, j < NR; weight rows past ncols alias row ncols - 1.
template <int MR, int NR>
DSPARK_AVX2 void tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t ncols,
                      int64_t k, float* out, Prefetch pf) {
  const float* xr[MR];
  const float* wr[NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) xr[r] = x + r * ldx;
#pragma GCC unroll 16
  for (int j = 0; j < NR; ++j) wr[j] = w + std::min<int64_t>(j, ncols - 1) * ldw;
  __m256 acc[MR][NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_setzero_ps();

  const char* goal = pf.next;
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    if (pf.next) prefetch_step(pf, goal);
    __m256 wv[NR];
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_loadu_ps(wr[j] + kk);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_loadu_ps(xr[r] + kk);
#pragma GCC unroll 16
      for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
    }
  }
  if (kk < k) {
    if (pf.next) prefetch_step(pf, goal);
    const __m256i mask = tail_mask(k - kk);
    __m256 wv[NR];
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_maskload_ps(wr[j] + kk, mask);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_maskload_ps(xr[r] + kk, mask);
#pragma GCC unroll 16
      for (int j = 0; j < NR; ++j) acc[r][j] = _mm256_fmadd_ps(xv, wv[j], acc[r][j]);
    }
  }

  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (int j0 = 0; j0 < NR; j0 += 4) {
      const __m128 s =
          reduce4(acc[r][j0], j0 + 1 < NR ? acc[r][j0 + 1] : zero,
                  j0 + 2 < NR ? acc[r][j0 + 2] : zero, j0 + 3 < NR ? acc[r][j0 + 3] : zero);
      float* o = out + r * kCols + j0;
      if (j0 + 4 <= NR) {
        _mm_storeu_ps(o, s);
      } else {
        alignas(16) float t[4];
        _mm_store_ps(t, s);
        for (int j = 0; j < NR - j0; ++j) o[j] = t[j];
      }
    }
  }
}

// Splits a prefetch range over the `calls` tile calls of a block, in order.
struct PrefetchPlan {
  const char* begin = nullptr;
  int64_t per_call = 0, per_step = 0;
  PrefetchPlan(const void* p, int64_t bytes, int64_t calls, int64_t k) {
    if (!p || bytes <= 0) return;
    begin = static_cast<const char*>(p);
    per_call = (bytes + calls - 1) / calls;
    per_step = (per_call + (k + 7) / 8 - 1) / ((k + 7) / 8);
  }
  Prefetch at(int64_t call) const {
    return begin ? Prefetch{begin + call * per_call, per_step} : Prefetch{};
  }
};

// M <= 4: one group of MR rows across the block, tiles as wide as 12 accumulators allow (so
// that even M = 1 keeps 12 independent FMA chains in flight).
template <int MR, int NR>
DSPARK_AVX2 void single_group(const float* x, int64_t ldx, const float* w, int64_t ldw,
                              int64_t ncols, int64_t k, float* out, const PrefetchPlan& plan) {
  static_assert(kCols % NR == 0);
  for (int64_t j0 = 0, call = 0; j0 < ncols; j0 += NR, ++call)
    tile<MR, NR>(x, ldx, w + j0 * ldw, ldw, ncols - j0, k, out + j0, plan.at(call));
}

}  // namespace

// M > 4: for each 3 weight rows, every group of (up to) 4 input rows, so that the weight rows are
// read from memory once and reused from L1 right away. The prefetch range is spread evenly over
// all tile calls of the block.
DSPARK_AVX2 void block_avx2(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                            int64_t ncols, int64_t k, float* out, const void* prefetch,
                            int64_t prefetch_bytes) {
  constexpr int kNr = 3;
  static_assert(kCols % kNr == 0);
  const int64_t groups = (m + 3) / 4;
  const int64_t nr = m == 1 ? 12 : m == 2 ? 6 : m == 3 ? 4 : kNr;
  const PrefetchPlan plan(prefetch, prefetch_bytes, groups * ((ncols + nr - 1) / nr), k);
  switch (m) {
    case 1:
      single_group<1, 12>(x, ldx, w, ldw, ncols, k, out, plan);
      return;
    case 2:
      single_group<2, 6>(x, ldx, w, ldw, ncols, k, out, plan);
      return;
    case 3:
      single_group<3, 4>(x, ldx, w, ldw, ncols, k, out, plan);
      return;
    case 4:
      single_group<4, 3>(x, ldx, w, ldw, ncols, k, out, plan);
      return;
    default:
      break;
  }
  int64_t call = 0;
  for (int64_t j0 = 0; j0 < ncols; j0 += kNr) {
    const float* wt = w + j0 * ldw;
    for (int64_t g = 0; g < groups; ++g, ++call) {
      const int64_t r = 4 * g;
      const Prefetch p = plan.at(call);
      float* o = out + r * kCols + j0;
      switch (std::min<int64_t>(4, m - r)) {
        case 4:
          tile<4, kNr>(x + r * ldx, ldx, wt, ldw, ncols - j0, k, o, p);
          break;
        case 3:
          tile<3, kNr>(x + r * ldx, ldx, wt, ldw, ncols - j0, k, o, p);
          break;
        case 2:
          tile<2, kNr>(x + r * ldx, ldx, wt, ldw, ncols - j0, k, o, p);
          break;
        default:
          tile<1, kNr>(x + r * ldx, ldx, wt, ldw, ncols - j0, k, o, p);
          break;
      }
    }
  }
}

DSPARK_AVX2 void convert_avx2(const void* src, DType dtype, int64_t count, float* dst) {
  int64_t i = 0;
  if (dtype == DType::bf16) {
    const auto* s = static_cast<const uint16_t*>(src);
    for (; i + 8 <= count; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      _mm256_storeu_ps(dst + i,
                       _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; i < count; ++i) dst[i] = bf16_to_f32(bf16{s[i]});
  } else if (dtype == DType::f16) {
    const auto* s = static_cast<const uint16_t*>(src);
    for (; i + 8 <= count; i += 8)
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    for (; i < count; ++i) dst[i] = f16_to_f32(f16{s[i]});
  } else {
    const auto* s = static_cast<const float*>(src);
    std::copy(s, s + count, dst);
  }
}

}  // namespace dspark::cpu::small_gemm_detail

#endif  // __x86_64__
