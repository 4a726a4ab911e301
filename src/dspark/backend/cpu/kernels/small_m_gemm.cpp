// The small-M product behind linear() (contract: small_m_gemm.h): the driver (blocks of weight
// rows spread over the thread pool, 16-bit weights converted block by block, bias and output
// dtype), the portable tiles, and the runtime choice of the AVX2 tiles (small_m_gemm_avx2.cpp).
#include "dspark/backend/cpu/kernels/small_m_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "dspark/backend/cpu/kernels/small_m_gemm_tiles.h"
#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace small_gemm_detail {
namespace {

// The portable tile: the same arithmetic as the AVX2 one with a multiply and an add instead of a
// fused multiply-add: 8 partial sums per (row, column), held as two 4-lane GNU vectors (SSE on
// x86-64, NEON on ARM; every lane is its own sequence of f32 operations, nothing is reordered).
using V4 = float __attribute__((vector_size(16)));

inline V4 load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <int MR, int NR>
void tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t ncols, int64_t k,
          float* out) {
  const float* xr[MR];
  const float* wr[NR];
  for (int r = 0; r < MR; ++r) xr[r] = x + r * ldx;
  for (int j = 0; j < NR; ++j) wr[j] = w + std::min<int64_t>(j, ncols - 1) * ldw;
  V4 lo[MR][NR] = {}, hi[MR][NR] = {};  // lanes 0-3 and 4-7
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    V4 wlo[NR], whi[NR];
    for (int j = 0; j < NR; ++j) {
      wlo[j] = load4(wr[j] + kk);
      whi[j] = load4(wr[j] + kk + 4);
    }
    for (int r = 0; r < MR; ++r) {
      const V4 xlo = load4(xr[r] + kk), xhi = load4(xr[r] + kk + 4);
      for (int j = 0; j < NR; ++j) {
        lo[r][j] += xlo * wlo[j];
        hi[r][j] += xhi * whi[j];
      }
    }
  }
  const int64_t rem = k - kk;
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j)
      for (int64_t l = 0; l < rem; ++l) {
        const float t = xr[r][kk + l] * wr[j][kk + l];
        if (l < 4) {
          lo[r][j][l] += t;
        } else {
          hi[r][j][l - 4] += t;
        }
      }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NR; ++j) {
      const V4 a = lo[r][j], b = hi[r][j];
      out[r * kCols + j] = ((a[0] + a[1]) + (a[2] + a[3])) + ((b[0] + b[1]) + (b[2] + b[3]));
    }
  }
}

}  // namespace

void block_portable(const float* x, int64_t ldx, int64_t m, const float* w, int64_t ldw,
                    int64_t ncols, int64_t k, float* out, const void* /*prefetch*/,
                    int64_t /*prefetch_bytes*/) {
  constexpr int kMr = 2, kNr = 2;  // 8 accumulator vectors + 4 weight + 2 input (16 xmm)
  static_assert(kCols % kNr == 0);
  for (int64_t j0 = 0; j0 < ncols; j0 += kNr) {
    int64_t r = 0;
    for (; r + kMr <= m; r += kMr)
      tile<kMr, kNr>(x + r * ldx, ldx, w + j0 * ldw, ldw, ncols - j0, k, out + r * kCols + j0);
    if (r < m)
      tile<1, kNr>(x + r * ldx, ldx, w + j0 * ldw, ldw, ncols - j0, k, out + r * kCols + j0);
  }
}

void convert_portable(const void* src, DType dtype, int64_t count, float* dst) {
  dispatch_float(dtype, [&]<typename T>(TypeTag<T>) {
    const T* s = static_cast<const T*>(src);
    for (int64_t i = 0; i < count; ++i) dst[i] = to_f32(s[i]);
  });
}

}  // namespace small_gemm_detail

namespace {

// How far ahead of the f32 weight rows being read the prefetch runs: 16 KiB (8 and 32 KiB
// measured within noise of it, 4 KiB and no prefetch clearly slower; bench_cpu_gemm).
constexpr int64_t kPrefetchAhead = 16 << 10;

// Per-thread f32 buffers (grow, never shrink): a converted weight block and a block of outputs.
float* thread_buffer(int slot, int64_t n) {
  thread_local std::vector<float> buffers[2];
  auto& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

}  // namespace

bool small_gemm_has_avx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

SmallGemmIsa small_gemm_default_isa() {
  return small_gemm_has_avx2() ? SmallGemmIsa::avx2 : SmallGemmIsa::portable;
}

std::string_view small_gemm_isa_name(SmallGemmIsa isa) {
  switch (isa) {
    case SmallGemmIsa::automatic:
      return "automatic";
    case SmallGemmIsa::portable:
      return "portable";
    case SmallGemmIsa::avx2:
      return "avx2";
  }
  return "?";
}

void small_gemm(ThreadPool& pool, const SmallGemmArgs& a, SmallGemmIsa isa) {
  namespace d = small_gemm_detail;
  DSPARK_CHECK(a.m >= 0 && a.n >= 0 && a.k >= 0, "small_gemm: negative size m={} n={} k={}", a.m,
               a.n, a.k);
  DSPARK_CHECK(a.m <= 1 || a.ldx >= a.k, "small_gemm: ldx {} < k {}", a.ldx, a.k);
  DSPARK_CHECK(a.m <= 1 || a.ldy >= a.n, "small_gemm: ldy {} < n {}", a.ldy, a.n);
  DSPARK_CHECK(dtype_is_float(a.w_dtype) && dtype_is_float(a.y_dtype),
               "small_gemm: float weights and outputs only (w {}, y {})", dtype_name(a.w_dtype),
               dtype_name(a.y_dtype));
  if (isa == SmallGemmIsa::automatic) isa = small_gemm_default_isa();
  DSPARK_CHECK_KIND(unsupported, isa != SmallGemmIsa::avx2 || small_gemm_has_avx2(),
                    "small_gemm: this CPU lacks AVX2/FMA/F16C");
  if (a.m == 0 || a.n == 0) return;
#if defined(__x86_64__)
  const bool avx2 = isa == SmallGemmIsa::avx2;
  const d::BlockFn block = avx2 ? d::block_avx2 : d::block_portable;
  const d::ConvertFn convert = avx2 ? d::convert_avx2 : d::convert_portable;
#else
  const d::BlockFn block = d::block_portable;
  const d::ConvertFn convert = d::convert_portable;
#endif
  const bool w_f32 = a.w_dtype == DType::f32;
  const size_t w_size = dtype_size(a.w_dtype);
  const int64_t m = a.m, n = a.n, k = a.k;
  const int64_t n_blocks = (n + kSmallGemmBlockCols - 1) / kSmallGemmBlockCols;
  // At least ~32k multiply-adds of one input row per task (a block is 12 x k of them).
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, kSmallGemmBlockCols * k));

  dispatch_float(a.y_dtype, [&]<typename TO>(TypeTag<TO>) {
    pool.parallel_for(n_blocks, grain, [&](int64_t b0, int64_t b1) {
      float* out = thread_buffer(0, m * kSmallGemmBlockCols);
      float* wbuf =
          w_f32 ? nullptr : thread_buffer(1, kSmallGemmBlockCols * std::max<int64_t>(k, 1));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t j0 = b * kSmallGemmBlockCols;
        const int64_t ncols = std::min(kSmallGemmBlockCols, n - j0);
        if (k == 0) {
          std::fill(out, out + m * kSmallGemmBlockCols, 0.0f);
        } else if (w_f32) {
          // Prefetch the same number of bytes kPrefetchAhead further on in the weight.
          const float* wb = static_cast<const float*>(a.w) + j0 * k;
          block(a.x, a.ldx, m, wb, k, ncols, k, out,
                reinterpret_cast<const char*>(wb) + kPrefetchAhead,
                ncols * k * static_cast<int64_t>(sizeof(float)));
        } else {
          const char* src = static_cast<const char*>(a.w) + static_cast<size_t>(j0 * k) * w_size;
          convert(src, a.w_dtype, ncols * k, wbuf);
          // Prefetch the next block of the 16-bit weight while this one computes.
          const int64_t next = std::min(kSmallGemmBlockCols, n - j0 - ncols);
          block(a.x, a.ldx, m, wbuf, k, ncols, k, out,
                next > 0 ? src + static_cast<size_t>(ncols * k) * w_size : nullptr,
                next * k * static_cast<int64_t>(w_size));
        }
        for (int64_t r = 0; r < m; ++r) {
          TO* yr = static_cast<TO*>(a.y) + r * a.ldy + j0;
          const float* o = out + r * kSmallGemmBlockCols;
          if (a.bias) {
            for (int64_t j = 0; j < ncols; ++j) yr[j] = from_f32<TO>(o[j] + a.bias[j0 + j]);
          } else {
            for (int64_t j = 0; j < ncols; ++j) yr[j] = from_f32<TO>(o[j]);
          }
        }
      }
    });
  });
}

}  // namespace dspark::cpu
