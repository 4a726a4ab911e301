// CPU kernel of linear (contract: ops/matmul.h).
//  - Few rows (M <= kSmallGemmMaxRows: decode, verify, drafter blocks), any float dtypes: our
//    register-blocked small-M kernel (small_m_gemm.h), which reads every weight row once, converts
//    16-bit weights block by block on the fly, and is batch invariant (a row's result does not
//    depend on M), so greedy verification reproduces plain greedy decoding bit for bit.
//  - Many rows (prefill), f32 weights: one OpenBLAS sgemm straight on the strided views.
//  - Many rows, 16-bit weights: the weight is converted block by block into scratch
//    (kWeightBlockFloats at most) and each block is one sgemm.
// Without OpenBLAS (DSPARK_HAVE_CBLAS=0, cmake/dependencies.cmake) every M goes through the
// small-M kernel (correct for any M, slower than sgemm for prefill).
#if DSPARK_HAVE_CBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <mutex>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/small_m_gemm.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

#if DSPARK_HAVE_CBLAS
constexpr int64_t kSmallRows = kSmallGemmMaxRows;  // rows handled by the small-M kernel
#else
constexpr int64_t kSmallRows = INT64_MAX;  // no sgemm: the small-M kernel for every M
#endif
constexpr int64_t kWeightBlockFloats = 4 << 20;  // converted weight block: 16 MiB of f32

// The leading dimension of a row-major [rows, cols] view (any value >= cols when rows == 1).
int64_t leading_dim(const Tensor& t) {
  return t.size(0) > 1 ? t.stride(0) : std::max<int64_t>(1, t.size(1));
}

#if DSPARK_HAVE_CBLAS
// y (f32 buffer with leading dim ldy) = bias broadcast over rows, or zeros.
void fill_bias(float* y, int64_t ldy, int64_t m, int64_t n, const std::vector<float>& bias) {
  for (int64_t r = 0; r < m; ++r) {
    float* row = y + r * ldy;
    if (bias.empty()) {
      std::fill(row, row + n, 0.0f);
    } else {
      std::copy(bias.begin(), bias.end(), row);
    }
  }
}

// y[m, n] = x . w^T + beta * y through OpenBLAS, its columns split over dspark's pool, each
// part one single-threaded sgemm: OpenBLAS's own threads would spin (sched_yield) beside the
// pool's on the same cores.
void sgemm_nt(ThreadPool& pool, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
              const float* w, int64_t ldw, float beta, float* y, int64_t ldy) {
  static std::once_flag single_threaded;
  std::call_once(single_threaded, [] { openblas_set_num_threads(1); });
  pool.parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(end - begin), static_cast<blasint>(k), 1.0f, x,
                static_cast<blasint>(ldx), w + begin * ldw, static_cast<blasint>(ldw), beta,
                y + begin, static_cast<blasint>(ldy));
  });
}

// Many rows (k > 0): y = xf . w^T + b through sgemm. scratch: [y as f32 when y is not f32, m * n]
// [converted weight block when w is not f32, block_rows * k].
void linear_sgemm(Context& ctx, const float* xf, int64_t ldx, const Tensor& w,
                  const std::vector<float>& b, const Tensor& y, float* scratch,
                  int64_t block_rows) {
  const int64_t m = y.size(0), n = y.size(1), k = w.size(1);
  const bool y_f32 = y.dtype() == DType::f32;
  float* yf = y_f32 ? y.data_as<float>() : scratch;
  const int64_t ldy = y_f32 ? leading_dim(y) : n;
  float* wblock = scratch + (y_f32 ? 0 : m * n);
  fill_bias(yf, ldy, m, n, b);
  if (w.dtype() == DType::f32) {
    sgemm_nt(ctx.pool(), m, n, k, xf, ldx, w.data_as<float>(), k, 1.0f, yf, ldy);
  } else {
    dispatch_float(w.dtype(), [&]<typename TW>(TypeTag<TW>) {
      const TW* wp = static_cast<const TW*>(w.data());
      for (int64_t j0 = 0; j0 < n; j0 += block_rows) {
        const int64_t rows = std::min(block_rows, n - j0);
        ctx.pool().parallel_for(rows, 8, [&](int64_t begin, int64_t end) {
          load_f32(wp + (j0 + begin) * k, wblock + begin * k, (end - begin) * k);
        });
        sgemm_nt(ctx.pool(), m, rows, k, xf, ldx, wblock, k, 1.0f, yf + j0, ldy);
      }
    });
  }
  if (!y_f32) {
    dispatch_float(y.dtype(), [&]<typename TO>(TypeTag<TO>) {
      ctx.pool().parallel_for(m, 4, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) store_f32(yf + r * n, row_ptr<TO>(y, r), n);
      });
    });
  }
}
#endif

}  // namespace

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  const std::vector<float> b = bias.defined() ? vector_f32(bias) : std::vector<float>{};
  const bool x_f32 = x.dtype() == DType::f32, y_f32 = y.dtype() == DType::f32;
  const bool small = m <= kSmallRows || k == 0;
  // Scratch layout: [x as f32 (when x is not f32)] then, for sgemm, [y as f32 (when y is not
  // f32)] [converted weight block (when w is not f32)].
  const int64_t x_floats = x_f32 ? 0 : m * k;
  const int64_t y_floats = (y_f32 || small) ? 0 : m * n;
  const int64_t block_rows =
      (w.dtype() == DType::f32 || small) ? 0 : std::clamp<int64_t>(kWeightBlockFloats / k, 16, n);
  float* xs = static_cast<float*>(
      ctx.scratch(static_cast<size_t>(x_floats + y_floats + block_rows * k + 1) * sizeof(float)));
  const float* xf = x_f32 ? x.data_as<float>() : xs;
  const int64_t ldx = x_f32 ? leading_dim(x) : k;
  if (!x_f32) {
    dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
      for (int64_t r = 0; r < m; ++r) load_f32(row_ptr<const TX>(x, r), xs + r * k, k);
    });
  }
  if (!small) {
#if DSPARK_HAVE_CBLAS
    linear_sgemm(ctx, xf, ldx, w, b, y, xs + x_floats, block_rows);
    return;
#endif
  }
  SmallGemmArgs args;
  args.x = xf;
  args.ldx = ldx;
  args.w = w.data();
  args.w_dtype = w.dtype();
  args.bias = b.empty() ? nullptr : b.data();
  args.y = y.data();
  args.y_dtype = y.dtype();
  args.ldy = leading_dim(y);
  args.m = m;
  args.n = n;
  args.k = k;
  small_gemm(ctx.pool(), args);
}

}  // namespace dspark::cpu
