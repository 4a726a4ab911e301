// CPU kernels of rms_norm, add_rms_norm and layer_norm (contract: ops/norm.h). One row per task;
// the row is loaded to f32, its mean square accumulated in double.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

// out = row * inv_rms * w   (row already f32)
template <typename TO>
void normalize_row(const float* row, const float* w, int64_t d, float eps, TO* out) {
  const double mean_sq = sum_squares(row, d) / static_cast<double>(d);
  const float inv_rms = static_cast<float>(1.0 / std::sqrt(mean_sq + static_cast<double>(eps)));
  float* tmp = thread_scratch(d, 1);
  for (int64_t j = 0; j < d; ++j) tmp[j] = row[j] * inv_rms * w[j];
  store_f32(tmp, out, d);
}

std::vector<float> effective_weight(const Tensor& weight, const RmsNormParams& params) {
  std::vector<float> w = vector_f32(weight);
  if (params.unit_offset)
    for (float& v : w) v += 1.0f;
  return w;
}

int64_t grain_for(int64_t d) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d));
}

}  // namespace

void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params) {
  const int64_t n = x.size(0), d = x.size(1);
  const std::vector<float> w = effective_weight(weight, params);
  dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      ctx.pool().parallel_for(n, grain_for(d), [&](int64_t begin, int64_t end) {
        float* row = thread_scratch(d, 0);
        for (int64_t r = begin; r < end; ++r) {
          load_f32(row_ptr<const TX>(x, r), row, d);
          normalize_row(row, w.data(), d, params.eps, row_ptr<TO>(out, r));
        }
      });
    });
  });
}

void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params) {
  const int64_t n = residual.size(0), d = residual.size(1);
  const std::vector<float> w = effective_weight(weight, params);
  dispatch_float(residual.dtype(), [&]<typename TR>(TypeTag<TR>) {
    dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        ctx.pool().parallel_for(n, grain_for(d), [&](int64_t begin, int64_t end) {
          float* sum = thread_scratch(d, 0);
          float* xr = thread_scratch(d, 2);
          for (int64_t r = begin; r < end; ++r) {
            TR* res = row_ptr<TR>(residual, r);
            load_f32(res, sum, d);
            load_f32(row_ptr<const TX>(x, r), xr, d);
            for (int64_t j = 0; j < d; ++j) sum[j] += xr[j];
            store_f32(sum, res, d);
            // Normalise the residual as stored (rounded to its dtype), as the reference
            // implementations do: the next layer reads exactly that value.
            load_f32(res, sum, d);
            normalize_row(sum, w.data(), d, params.eps, row_ptr<TO>(out, r));
          }
        });
      });
    });
  });
}

void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& out, float eps) {
  const int64_t n = x.size(0), d = x.size(1);
  const std::vector<float> w = vector_f32(weight), b = vector_f32(bias);
  dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      ctx.pool().parallel_for(n, grain_for(d), [&](int64_t begin, int64_t end) {
        float* row = thread_scratch(d, 0);
        for (int64_t r = begin; r < end; ++r) {
          load_f32(row_ptr<const TX>(x, r), row, d);
          double sum = 0;
          for (int64_t j = 0; j < d; ++j) sum += row[j];
          const auto mean = static_cast<float>(sum / static_cast<double>(d));
          double var = 0;
          for (int64_t j = 0; j < d; ++j) {
            row[j] -= mean;
            var += static_cast<double>(row[j]) * row[j];
          }
          const auto inv = static_cast<float>(1.0 / std::sqrt(var / static_cast<double>(d) + eps));
          for (int64_t j = 0; j < d; ++j) row[j] = row[j] * inv * w[j] + b[j];
          store_f32(row, row_ptr<TO>(out, r), d);
        }
      });
    });
  });
}

}  // namespace dspark::cpu
