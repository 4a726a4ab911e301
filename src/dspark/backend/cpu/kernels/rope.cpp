// CPU kernel of rope (contract: ops/rope.h). Per token: cos/sin of every frequency once (angle in
// f32, as the reference computes position * inv_freq), then every head of the token is rotated.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {

void rope(Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          float attention_scaling) {
  const int64_t n = x.size(0), heads = x.size(1);
  const int64_t half = inv_freq.size(0);
  const int32_t* pos = positions.data_as<int32_t>();
  const float* freq = inv_freq.data_as<float>();
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, heads * half));
    ctx.pool().parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      float* cs = thread_scratch(2 * half, 0);
      float* sn = cs + half;
      float* buf = thread_scratch(2 * half, 1);
      for (int64_t i = begin; i < end; ++i) {
        const float p = static_cast<float>(pos[i]);
        for (int64_t j = 0; j < half; ++j) {
          const float angle = p * freq[j];
          cs[j] = std::cos(angle) * attention_scaling;
          sn[j] = std::sin(angle) * attention_scaling;
        }
        for (int64_t h = 0; h < heads; ++h) {
          T* v = static_cast<T*>(x.data()) + i * x.stride(0) + h * x.stride(1);
          load_f32(v, buf, 2 * half);
          for (int64_t j = 0; j < half; ++j) {
            const float x1 = buf[j], x2 = buf[j + half];
            buf[j] = x1 * cs[j] - x2 * sn[j];
            buf[j + half] = x2 * cs[j] + x1 * sn[j];
          }
          store_f32(buf, v, 2 * half);
        }
      }
    });
  });
}

}  // namespace dspark::cpu
