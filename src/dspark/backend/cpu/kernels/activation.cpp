// CPU kernels of swiglu, add and convert (contract: ops/activation.h). Rows are processed in
// chunks through f32 thread buffers, so outputs may alias inputs element for element.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kChunk = 1024;  // elements per f32 buffer pass

// out[r, :] = f(a[r, :], b[r, :]) elementwise, computed in f32.
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
              for (int64_t j = 0; j < len; ++j) fa[j] = f(fa[j], fb[j]);
              store_f32(fa, row_ptr<TO>(out, r) + c0, len);
            }
          }
        });
      });
    });
  });
}

}  // namespace

void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  binary_rows(ctx, gate, up, out, [](float g, float u) { return g / (1.0f + std::exp(-g)) * u; });
}

void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  binary_rows(ctx, a, b, out, [](float x, float y) { return x + y; });
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
