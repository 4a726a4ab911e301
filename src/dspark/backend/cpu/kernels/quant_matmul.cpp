// CPU kernels of linear and gather_rows with block-quantized weights (contract: ops/matmul.h,
// ops/embedding.h): each weight row is dequantized once per call (core/quant.h's reference values)
// into a thread's f32 scratch row and multiplied with every row of x; threads take blocks of
// weight rows. A row's result is the same f32 dot product (dot_f32) whatever M is.
#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/quant.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

const uint8_t* weight_row(const WeightMatrix& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data.data()) + r * w.data.stride(0);
}

}  // namespace

void linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                   const Tensor& y) {
  const int64_t m = x.size(0), n = w.n, k = w.k;
  const int64_t blocks_per_row = k / quant_block(w.quant).elements;
  // x as f32 rows, converted once.
  std::vector<float> xf(static_cast<size_t>(m * k));
  dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
    for (int64_t r = 0; r < m; ++r) load_f32(row_ptr<const TX>(x, r), xf.data() + r * k, k);
  });
  const std::vector<float> b = bias.defined() ? vector_f32(bias) : std::vector<float>{};
  dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
    ctx.pool().parallel_for(n, 16, [&](int64_t begin, int64_t end) {
      float* wf = thread_scratch(k);
      for (int64_t j = begin; j < end; ++j) {
        dequantize_blocks(w.quant, weight_row(w, j), blocks_per_row, wf);
        for (int64_t r = 0; r < m; ++r) {
          float v = dot_f32(xf.data() + r * k, wf, k);
          if (!b.empty()) v += b[static_cast<size_t>(j)];
          row_ptr<TY>(y, r)[j] = from_f32<TY>(v);
        }
      }
    });
  });
}

void gather_rows_blocks(Context& ctx, const WeightMatrix& table, const Tensor& ids,
                        const Tensor& out) {
  const int64_t n = ids.size(0), k = table.k;
  const int64_t blocks_per_row = k / quant_block(table.quant).elements;
  const int32_t* id = ids.data_as<int32_t>();
  dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
    ctx.pool().parallel_for(n, 4, [&](int64_t begin, int64_t end) {
      float* row = thread_scratch(k);
      for (int64_t i = begin; i < end; ++i) {
        dequantize_blocks(table.quant, weight_row(table, id[i]), blocks_per_row, row);
        store_f32(row, row_ptr<TO>(out, i), k);
      }
    });
  });
}

}  // namespace dspark::cpu
