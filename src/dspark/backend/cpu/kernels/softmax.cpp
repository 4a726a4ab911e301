// CPU kernels of softmax, log_softmax and argmax (contract: ops/softmax.h). One row per task, the
// row loaded to f32; sums of exponentials in double.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

// For each row: loads it as f32 into a thread buffer and calls f(row, n_cols, r).
template <typename F>
void for_each_row_f32(Context& ctx, const Tensor& x, F f) {
  const int64_t n = x.size(0), v = x.size(1);
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, v));
    ctx.pool().parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      float* row = thread_scratch(v, 0);
      for (int64_t r = begin; r < end; ++r) {
        load_f32(row_ptr<const T>(x, r), row, v);
        f(row, v, r);
      }
    });
  });
}

float row_max(const float* row, int64_t v) {
  float m = -INFINITY;
  for (int64_t i = 0; i < v; ++i) m = std::max(m, row[i]);
  return m;
}

}  // namespace

void softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  for_each_row_f32(ctx, x, [&](float* row, int64_t v, int64_t r) {
    const float m = row_max(row, v);
    double sum = 0.0;
    for (int64_t i = 0; i < v; ++i) {
      row[i] = std::exp(row[i] - m);
      sum += row[i];
    }
    float* o = row_ptr<float>(out, r);
    for (int64_t i = 0; i < v; ++i) o[i] = static_cast<float>(row[i] / sum);
  });
}

void log_softmax(Context& ctx, const Tensor& x, const Tensor& out) {
  for_each_row_f32(ctx, x, [&](float* row, int64_t v, int64_t r) {
    const float m = row_max(row, v);
    double sum = 0.0;
    for (int64_t i = 0; i < v; ++i) sum += std::exp(row[i] - m);
    const double log_sum = std::log(sum);
    float* o = row_ptr<float>(out, r);
    for (int64_t i = 0; i < v; ++i)
      o[i] = static_cast<float>(static_cast<double>(row[i]) - m - log_sum);
  });
}

void argmax(Context& ctx, const Tensor& x, const Tensor& out, const Tensor& index_map) {
  int32_t* o = out.data_as<int32_t>();
  const int32_t* map = index_map.defined() ? index_map.data_as<int32_t>() : nullptr;
  for_each_row_f32(ctx, x, [&](float* row, int64_t v, int64_t r) {
    const int64_t i = argmax_f32(row, v);
    o[r] = map ? map[i] : static_cast<int32_t>(i);
  });
}

}  // namespace dspark::cpu
