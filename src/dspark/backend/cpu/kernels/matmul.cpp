// CPU kernel of linear (contract: ops/matmul.h).
//  - f32 x, w, y: one OpenBLAS sgemm (sgemv for one row) straight on the strided views.
//  - 16-bit weights, few rows (decode): each task converts a weight row once into a thread-local
//    f32 row and dots it with every input row (the weight is read once, no f32 copy of it).
//  - 16-bit weights, many rows (prefill): the weight is converted block by block into scratch
//    (kWeightBlockFloats at most) and each block is one sgemm.
// Without OpenBLAS (DSPARK_HAVE_CBLAS=0, cmake/dependencies.cmake) sgemm is a plain dot-product
// loop: same results up to summation order, much slower.
#if DSPARK_HAVE_CBLAS
#include <cblas.h>
#endif

#include <algorithm>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kSmallRows = 8;                // rows handled by the dot kernel
constexpr int64_t kWeightBlockFloats = 4 << 20;  // converted weight block: 16 MiB of f32

// The leading dimension of a row-major [rows, cols] view (any value >= cols when rows == 1).
int64_t leading_dim(const Tensor& t) {
  return t.size(0) > 1 ? t.stride(0) : std::max<int64_t>(1, t.size(1));
}

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

void sgemm_nt(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
              int64_t ldw, float beta, float* y, int64_t ldy) {
#if !DSPARK_HAVE_CBLAS
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      float& out = y[r * ldy + j];
      out = (beta == 0.0f ? 0.0f : beta * out) + dot_f32(x + r * ldx, w + j * ldw, k);
    }
  }
#else
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k), 1.0f,
                w, static_cast<blasint>(ldw), x, 1, beta, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x,
                static_cast<blasint>(ldx), w, static_cast<blasint>(ldw), beta, y,
                static_cast<blasint>(ldy));
  }
#endif
}

// Few rows: y[r, j] = x[r, :] . w[j, :] + bias[j], weight rows converted on the fly.
template <typename TW, typename TO>
void linear_rows(Context& ctx, const float* xf, int64_t ldx, const TW* w, int64_t m, int64_t n,
                 int64_t k, const std::vector<float>& bias, const Tensor& y) {
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k));
  ctx.pool().parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    float* wrow = thread_scratch(k, 0);
    for (int64_t j = begin; j < end; ++j) {
      const float* wj = wrow;
      if constexpr (std::is_same_v<TW, float>) {
        wj = w + j * k;
      } else {
        load_f32(w + j * k, wrow, k);
      }
      const float b = bias.empty() ? 0.0f : bias[static_cast<size_t>(j)];
      for (int64_t r = 0; r < m; ++r)
        row_ptr<TO>(y, r)[j] = from_f32<TO>(dot_f32(xf + r * ldx, wj, k) + b);
    }
  });
}

}  // namespace

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  const std::vector<float> b = bias.defined() ? vector_f32(bias) : std::vector<float>{};
  const bool x_f32 = x.dtype() == DType::f32, y_f32 = y.dtype() == DType::f32;
  if (k == 0) {  // no inputs: y = bias
    dispatch_float(y.dtype(), [&]<typename TO>(TypeTag<TO>) {
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j)
          row_ptr<TO>(y, r)[j] = from_f32<TO>(b.empty() ? 0.0f : b[static_cast<size_t>(j)]);
    });
    return;
  }
  // Scratch layout: [x as f32 (when x is not f32)] [y as f32 (when y is not f32)] [weight block].
  const bool small = m <= kSmallRows && (w.dtype() != DType::f32 || !y_f32);
  const int64_t x_floats = x_f32 ? 0 : m * k;
  const int64_t y_floats = (y_f32 || small) ? 0 : m * n;
  int64_t block_rows = std::clamp<int64_t>(kWeightBlockFloats / k, 16, n);
  if (w.dtype() == DType::f32 || small) block_rows = 0;
  float* scratch = static_cast<float*>(
      ctx.scratch(static_cast<size_t>(x_floats + y_floats + block_rows * k + 1) * sizeof(float)));
  float* xs = scratch;
  float* ys = xs + x_floats;
  float* wblock = ys + y_floats;

  const float* xf = x_f32 ? x.data_as<float>() : xs;
  const int64_t ldx = x_f32 ? leading_dim(x) : k;
  if (!x_f32) {
    dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
      for (int64_t r = 0; r < m; ++r) load_f32(row_ptr<const TX>(x, r), xs + r * k, k);
    });
  }

  if (small) {
    dispatch_float(w.dtype(), [&]<typename TW>(TypeTag<TW>) {
      dispatch_float(y.dtype(), [&]<typename TO>(TypeTag<TO>) {
        linear_rows<TW, TO>(ctx, xf, ldx, static_cast<const TW*>(w.data()), m, n, k, b, y);
      });
    });
    return;
  }

  float* yf = y_f32 ? y.data_as<float>() : ys;
  const int64_t ldy = y_f32 ? leading_dim(y) : n;
  fill_bias(yf, ldy, m, n, b);
  if (w.dtype() == DType::f32) {
    sgemm_nt(m, n, k, xf, ldx, w.data_as<float>(), k, 1.0f, yf, ldy);
  } else {
    dispatch_float(w.dtype(), [&]<typename TW>(TypeTag<TW>) {
      const TW* wp = static_cast<const TW*>(w.data());
      for (int64_t j0 = 0; j0 < n; j0 += block_rows) {
        const int64_t rows = std::min(block_rows, n - j0);
        ctx.pool().parallel_for(rows, 8, [&](int64_t begin, int64_t end) {
          load_f32(wp + (j0 + begin) * k, wblock + begin * k, (end - begin) * k);
        });
        sgemm_nt(m, rows, k, xf, ldx, wblock, k, 1.0f, yf + j0, ldy);
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

}  // namespace dspark::cpu
