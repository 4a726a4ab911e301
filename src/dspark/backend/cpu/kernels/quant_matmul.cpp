// CPU kernels of linear and gather_rows with block-quantized weights (contract: ops/matmul.h,
// ops/embedding.h).
//  - linear: the integer kernels of quant_gemm.h (x rounded to 8-bit blocks once per call, every
//    weight block multiplied in integers, AVX2 when the CPU has it): one path for every M, so a
//    row's result does not depend on M, on the other rows or on the thread split.
//  - gather_rows: each requested row dequantized with core/quant.h's reference (the values of
//    gguf.quants.dequantize; an interleaved row first put back in the plain layout), rows spread
//    over the pool.
#include <vector>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/quant_gemm.h"
#include "dspark/backend/cpu/kernels/quant_pack.h"
#include "dspark/core/quant.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

const uint8_t* weight_row(const WeightMatrix& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data.data()) + r * w.data.stride(0);
}

// The leading dimension of a row-major [rows, cols] view (any value >= cols when rows == 1).
int64_t leading_dim(const Tensor& t) {
  return t.size(0) > 1 ? t.stride(0) : std::max<int64_t>(1, t.size(1));
}

}  // namespace

void linear_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                   const Tensor& y) {
  const std::vector<float> b = bias.defined() ? vector_f32(bias) : std::vector<float>{};
  QuantGemmArgs args;
  args.x = x.data();
  args.x_dtype = x.dtype();
  args.ldx = leading_dim(x);
  args.w = static_cast<const uint8_t*>(w.data.data());
  args.quant = w.quant;
  args.packed = w.format == WeightFormat::blocks_x8;
  args.bias = b.empty() ? nullptr : b.data();
  args.y = y.data();
  args.y_dtype = y.dtype();
  args.ldy = leading_dim(y);
  args.m = x.size(0);
  args.n = w.n;
  args.k = w.k;
  quant_gemm(ctx.pool(), args);
}

void linear_blocks_grouped(Context& ctx, const Tensor& x, std::span<const WeightMatrix> w,
                           std::span<const int64_t> offsets, const Tensor& y) {
  DSPARK_CHECK(!w.empty() && offsets.size() == w.size() + 1,
               "linear_blocks_grouped: {} weights, {} offsets", w.size(), offsets.size());
  QuantGemmArgs shared;
  shared.x_dtype = x.dtype();
  shared.ldx = leading_dim(x);
  shared.quant = w[0].quant;
  shared.packed = w[0].format == WeightFormat::blocks_x8;
  shared.y_dtype = y.dtype();
  shared.ldy = leading_dim(y);
  shared.n = w[0].n;
  shared.k = w[0].k;
  thread_local std::vector<QuantGemmProblem> problems;  // reused: a MoE layer's every step
  problems.clear();
  for (size_t p = 0; p < w.size(); ++p) {
    DSPARK_CHECK(w[p].format == w[0].format && w[p].quant == w[0].quant && w[p].n == shared.n &&
                     w[p].k == shared.k,
                 "linear_blocks_grouped: weight {} differs from the first in shape or format", p);
    const int64_t lo = offsets[p], hi = offsets[p + 1];
    if (lo == hi) continue;
    problems.push_back({x.rows(lo, hi).data(), static_cast<const uint8_t*>(w[p].data.data()),
                        y.rows(lo, hi).data(), hi - lo});
  }
  quant_gemm_grouped(ctx.pool(), shared, problems);
}

void gather_rows_blocks(Context& ctx, const WeightMatrix& table, const Tensor& ids,
                        const Tensor& out) {
  const int64_t n = ids.size(0), k = table.k;
  const int64_t blocks_per_row = k / quant_block(table.quant).elements;
  const int32_t* id = ids.data_as<int32_t>();
  dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
    const bool packed = table.format == WeightFormat::blocks_x8;
    const int64_t row_bytes = quant_row_bytes(table.quant, k);
    ctx.pool().parallel_for(n, 4, [&](int64_t begin, int64_t end) {
      float* row = thread_scratch(k);
      std::vector<uint8_t> plain(packed ? static_cast<size_t>(row_bytes) : 0);
      for (int64_t i = begin; i < end; ++i) {
        const uint8_t* src = weight_row(table, id[i]);
        if (packed) {
          unpack_row_x8(table.quant, static_cast<const uint8_t*>(table.data.data()), table.n, k,
                        id[i], plain.data());
          src = plain.data();
        }
        dequantize_blocks(table.quant, src, blocks_per_row, row);
        store_f32(row, row_ptr<TO>(out, i), k);
      }
    });
  });
}

}  // namespace dspark::cpu
