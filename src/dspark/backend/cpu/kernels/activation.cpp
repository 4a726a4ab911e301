// CPU kernels of swiglu, add and convert (contract: ops/activation.h). Rows are processed in
// chunks through f32 thread buffers, so outputs may alias inputs element for element.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/fast_exp.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kChunk = 1024;  // elements per f32 buffer pass

// out[r, :] = f(a[r, :], b[r, :]) elementwise, computed in f32: f(a, b, out, len) on f32 runs.
template <typename F>
void binary_rows(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const int64_t n = a.size(0), d = a.size(1);
  dispatch_float(a.dtype(), [&]<typename TA>(TypeTag<TA>) {
    dispatch_float(b.dtype(), [&]<typename TB>(TypeTag<TB>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d));
        ctx.pool().parallel_for(n, grain, [&](int64_t begin, int64_t end) {
          float* fa = thread_scratch(kChunk, 0);
          float* fb = thread_scratch(kChunk, 1);
          for (int64_t r = begin; r < end; ++r) {
            for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
              const int64_t len = std::min(kChunk, d - c0);
              load_f32(row_ptr<const TA>(a, r) + c0, fa, len);
              load_f32(row_ptr<const TB>(b, r) + c0, fb, len);
              f(fa, fb, fa, len);
              store_f32(fa, row_ptr<TO>(out, r) + c0, len);
            }
          }
        });
      });
    });
  });
}

// o[j] = g[j] / (1 + exp(-g[j])) * u[j] with fast_exp's exp: 8 at a time on AVX2, the same bits
// as the portable loop.
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) int64_t swiglu_avx2(const float* g, const float* u, float* o,
                                                        int64_t n) {
  int64_t j = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; j + 8 <= n; j += 8) {
    const __m256 gv = _mm256_loadu_ps(g + j);
    const __m256 e = fast_exp::exp8(_mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));
    _mm256_storeu_ps(
        o + j, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + j)));
  }
  return j;
}
#endif

void swiglu_run(const float* g, const float* u, float* o, int64_t n) {
  int64_t j = 0;
#if defined(__x86_64__)
  if (fast_exp::has_avx2()) j = swiglu_avx2(g, u, o, n);
#endif
  for (; j < n; ++j) o[j] = g[j] / (1.0f + fast_exp::exp1(-g[j])) * u[j];
}

}  // namespace

void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  binary_rows(ctx, gate, up, out, swiglu_run);
}

void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  binary_rows(ctx, a, b, out, [](const float* x, const float* y, float* o, int64_t n) {
    for (int64_t j = 0; j < n; ++j) o[j] = x[j] + y[j];
  });
}

void convert(Context& ctx, const Tensor& src, const Tensor& out) {
  const int64_t n = src.size(0), d = src.size(1);
  dispatch_float(src.dtype(), [&]<typename TS>(TypeTag<TS>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d));
      ctx.pool().parallel_for(n, grain, [&](int64_t begin, int64_t end) {
        float* buf = thread_scratch(kChunk, 0);
        for (int64_t r = begin; r < end; ++r) {
          const TS* s = row_ptr<const TS>(src, r);
          TO* o = row_ptr<TO>(out, r);
          if constexpr (std::is_same_v<TS, TO>) {
            if (static_cast<const void*>(s) != static_cast<const void*>(o))
              std::memmove(o, s, static_cast<size_t>(d) * sizeof(TS));
          } else {
            for (int64_t c0 = 0; c0 < d; c0 += kChunk) {
              const int64_t len = std::min(kChunk, d - c0);
              load_f32(s + c0, buf, len);
              store_f32(buf, o + c0, len);
            }
          }
        }
      });
    });
  });
}

}  // namespace dspark::cpu
