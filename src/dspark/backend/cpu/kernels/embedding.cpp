// CPU kernel of gather_rows (contract: ops/embedding.h).
#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {

void gather_rows(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out) {
  const int64_t n = ids.size(0);
  const int64_t h = table.size(1);
  const int32_t* id = ids.data_as<int32_t>();
  dispatch_float(table.dtype(), [&]<typename TT>(TypeTag<TT>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      ctx.pool().parallel_for(n, 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const TT* src = row_ptr<TT>(table, id[i]);
          TO* dst = row_ptr<TO>(out, i);
          if constexpr (std::is_same_v<TT, TO>) {
            std::memcpy(dst, src, static_cast<size_t>(h) * sizeof(TT));
          } else {
            for (int64_t j = 0; j < h; ++j) dst[j] = from_f32<TO>(to_f32(src[j]));
          }
        }
      });
    });
  });
}

}  // namespace dspark::cpu
