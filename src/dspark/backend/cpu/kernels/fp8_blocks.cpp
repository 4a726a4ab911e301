// CPU kernel of linear with FP8 block-scaled weights (WeightFormat::fp8_blocks; contract:
// ops/matmul.h). Each output row of the weight is decoded once per call into f32 values times
// 2^-8 (with AVX2 + F16C 16 codes at a time as f16 bit patterns, else through a 256-entry table:
// the same values) and multiplied with every row of x: per chunk of 64 values an f32 dot product
// of fused multiply-adds (chunk_dot: AVX2 + FMA or a portable loop, the same bits), then 2^8
// times the chunk's block scale times that sum added to the row's total in k order (the chunking
// of the CUDA kernels). A row's result depends only on that row of x: not on M, the other rows,
// the thread split or the instruction set.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/small_m_gemm.h"
#include "dspark/core/fp8.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kScaleChunk = 64;  // values of k per chunk sum

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c)
      t[static_cast<size_t>(c)] = std::ldexp(e4m3_to_f32(static_cast<uint8_t>(c)), -8);
    return t;
  }();
  return table;
}

#if defined(__x86_64__)
#define FP8_AVX2 __attribute__((target("avx2")))

// n (a multiple of 16) E4M3 codes to f32, each value times 2^-8 (exactly): a code's 7 magnitude
// bits shifted under f16's exponent and mantissa are an f16 of 2^-8 times the code's value,
// normal and subnormal codes alike (the exponent biases are 15 and 7); the sign moves to bit 15;
// 0x7F / 0xFF become NaN; F16C widens them to f32.
__attribute__((target("avx2,f16c"))) void decode_e4m3_avx2(const uint8_t* q, float* out,
                                                           int64_t n) {
  const __m256i magnitude_mask = _mm256_set1_epi16(0x7F), nan_code = _mm256_set1_epi16(0x7F);
  const __m256i sign_mask = _mm256_set1_epi16(static_cast<int16_t>(0x8000));
  const __m256i nan_half = _mm256_set1_epi16(0x7E00);
  for (int64_t j = 0; j < n; j += 16) {
    const __m256i v =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j)));
    const __m256i magnitude = _mm256_and_si256(v, magnitude_mask);
    __m256i half = _mm256_or_si256(_mm256_slli_epi16(magnitude, 7),
                                   _mm256_and_si256(_mm256_slli_epi16(v, 8), sign_mask));
    half = _mm256_blendv_epi8(half, nan_half, _mm256_cmpeq_epi16(magnitude, nan_code));
    _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm256_castsi256_si128(half)));
    _mm256_storeu_ps(out + j + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)));
  }
}

// The whole weight row against NR rows of x at once (row r at x + r * ldx; k a multiple of 64),
// each weight vector loaded once. Per chunk of 64 values and row of x, lane l of 16 (j % 16 == l)
// accumulates its products by fused multiply-adds in j order, lanes l and l + 8 are added, then
// the 8 sums pairwise in a fixed order (chunk_dot does the same operations); then acc[r] += 2^8 s
// * sum in k order (s the chunk's block scale), by scalar intrinsics that the compiler does not
// fuse into one multiply-add. The same operations for each row as for one, and as row_dots'
// portable loop: the same bits.
template <int NR>
FP8_AVX2 __attribute__((target("fma"))) void row_dots_avx2(const float* w, const float* x,
                                                           int64_t ldx, int64_t k,
                                                           const float* scales, int64_t block_k,
                                                           float* acc) {
  for (int64_t c = 0; c < k; c += kScaleChunk) {
    __m256 a0[NR], a1[NR];
    for (int r = 0; r < NR; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
    for (int64_t j = c; j < c + kScaleChunk; j += 16) {
      const __m256 w0 = _mm256_loadu_ps(w + j), w1 = _mm256_loadu_ps(w + j + 8);
      for (int r = 0; r < NR; ++r) {
        a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * ldx + j), a0[r]);
        a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + r * ldx + j + 8), a1[r]);
      }
    }
    const __m128 scale = _mm_mul_ss(_mm_set_ss(256.0f), _mm_set_ss(scales[c / block_k]));
    for (int r = 0; r < NR; ++r) {
      const __m256 s = _mm256_add_ps(a0[r], a1[r]);
      const __m128 h =
          _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // s_l + s_l+4
      const __m128 q =
          _mm_add_ps(h, _mm_movehl_ps(h, h));  // (s0 + s4) + (s2 + s6), (s1 + s5) + (s3 + s7)
      const __m128 sum = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
      acc[r] = _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(acc[r]), _mm_mul_ss(scale, sum)));
    }
  }
}
#endif

// A chunk's dot product (len <= 64) as row_dots_avx2 computes it, the values past the last whole 16
// added in j order at the end.
float chunk_dot(const float* w, const float* x, int64_t len) {
  float lane[16] = {};
  int64_t j = 0;
  for (; j + 16 <= len; j += 16)
    for (int l = 0; l < 16; ++l) lane[l] = std::fma(w[j + l], x[j + l], lane[l]);
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = lane[l] + lane[l + 8];
  float tail = 0.0f;
  for (; j < len; ++j) tail = std::fma(w[j], x[j], tail);
  return (((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))) + tail;
}

// acc[r] += the row's products with nr (<= 4) rows of x (row r at x + r * ldx), chunk by chunk
// of 64 values in k order, each chunk's chunk_dot times 2^8 times its block scale.
void row_dots(const float* w, const float* x, int64_t ldx, int64_t nr, int64_t k,
              const float* scales, int64_t block_k, float* acc) {
#if defined(__x86_64__)
  if (k % kScaleChunk == 0 && small_gemm_has_avx2()) {
    switch (nr) {
      case 1:
        return row_dots_avx2<1>(w, x, ldx, k, scales, block_k, acc);
      case 2:
        return row_dots_avx2<2>(w, x, ldx, k, scales, block_k, acc);
      case 3:
        return row_dots_avx2<3>(w, x, ldx, k, scales, block_k, acc);
      default:
        return row_dots_avx2<4>(w, x, ldx, k, scales, block_k, acc);
    }
  }
#endif
  for (int64_t c = 0; c < k; c += kScaleChunk) {
    const int64_t len = std::min(kScaleChunk, k - c);
    const float scale = 256.0f * scales[c / block_k];
    for (int64_t r = 0; r < nr; ++r) acc[r] += scale * chunk_dot(w + c, x + r * ldx + c, len);
  }
}

// n E4M3 codes to f32 values times 2^-8 (the kernel's scales carry the 2^8).
void decode_e4m3(const uint8_t* q, float* out, int64_t n) {
  int64_t j = 0;
#if defined(__x86_64__)
  if (small_gemm_has_avx2()) {
    j = n / 16 * 16;
    decode_e4m3_avx2(q, out, j);
  }
#endif
  const std::array<float, 256>& table = e4m3_table();
  for (; j < n; ++j) out[j] = table[q[j]];
}

}  // namespace

void linear_fp8_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                       const Tensor& y) {
  const int64_t m = x.size(0), n = w.n, k = w.k;
  const int64_t scale_cols = (k + w.block_k - 1) / w.block_k;
  // x as f32 rows in the context's scratch (no allocation per call on a decode step).
  auto* xf = static_cast<float*>(ctx.scratch(static_cast<size_t>(m * k) * sizeof(float)));
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    for (int64_t r = 0; r < m; ++r) load_f32(row_ptr<const T>(x, r), xf + r * k, k);
  });
  const std::vector<float> b = bias.defined() ? vector_f32(bias) : std::vector<float>{};
  const auto* codes = static_cast<const uint8_t*>(w.data.data());
  const auto* scales = static_cast<const float*>(w.scales.data());
  dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
    ctx.pool().parallel_for(n, 8, [&](int64_t begin, int64_t end) {
      float* row = thread_scratch(k);
      for (int64_t i = begin; i < end; ++i) {
        const uint8_t* q = codes + i * k;
        decode_e4m3(q, row, k);
        const float* s = scales + (i / w.block_n) * scale_cols;
        for (int64_t r0 = 0; r0 < m; r0 += 4) {  // up to 4 rows of x share each weight load
          const int64_t nr = std::min<int64_t>(4, m - r0);
          float acc[4] = {};
          row_dots(row, xf + r0 * k, k, nr, k, s, w.block_k, acc);
          for (int64_t r = 0; r < nr; ++r) {
            if (!b.empty()) acc[r] += b[static_cast<size_t>(i)];
            row_ptr<TY>(y, r0 + r)[i] = from_f32<TY>(acc[r]);
          }
        }
      }
    });
  });
}

}  // namespace dspark::cpu
