#include "dspark/core/convert_host.h"

#include <cstring>

#include "dspark/core/thread_pool.h"

namespace dspark {

void convert_host(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  dispatch_float(src_dtype, [&]<typename S>(TypeTag<S>) {
    dispatch_float(dst_dtype, [&]<typename D>(TypeTag<D>) {
      const auto* s = static_cast<const unsigned char*>(src);
      D* d = static_cast<D*>(dst);
      ThreadPool::global().parallel_for(n, 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          S v;
          std::memcpy(&v, s + static_cast<size_t>(i) * sizeof(S), sizeof(S));
          d[i] = from_f32<D>(to_f32(v));
        }
      });
    });
  });
}

}  // namespace dspark
