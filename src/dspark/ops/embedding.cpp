// Argument checks and device dispatch of the embedding op (contract: ops/embedding.h).
#include "dspark/ops/embedding.h"

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

void gather_rows(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out) {
  constexpr const char* kOp = "gather_rows";
  check_rank(kOp, "table", table, 2);
  check_float(kOp, "table", table);
  check_rows_contiguous(kOp, "table", table);
  check_vector(kOp, "ids", ids, DType::i32, -1);
  const int64_t n = ids.size(0);
  check_shape(kOp, "out", out, Shape{n, table.size(1)});
  check_float(kOp, "out", out);
  check_rows_contiguous(kOp, "out", out);
  for (const Tensor* t : {&table, &ids, &out}) check_on_device(kOp, "tensor", *t, ctx);
  if (n == 0 || table.size(1) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::gather_rows(ctx, table, ids, out));
  } else {
    const int32_t* id = ids.data_as<int32_t>();
    const int64_t vocab = table.size(0);
    for (int64_t i = 0; i < n; ++i)
      DSPARK_CHECK_KIND(invalid_input, id[i] >= 0 && id[i] < vocab,
                        "{}: ids[{}] = {} is outside the table's {} rows", kOp, i, id[i], vocab);
    cpu::gather_rows(ctx, table, ids, out);
  }
}

void gather_rows(Context& ctx, const WeightMatrix& table, const Tensor& ids, const Tensor& out) {
  if (!table.quantized()) return gather_rows(ctx, table.data, ids, out);
  constexpr const char* kOp = "gather_rows";
  check_weight_matrix(ctx, kOp, "table", table);
  DSPARK_CHECK_KIND(unsupported, table.format != WeightFormat::fp8_blocks,
                    "{}: tables of FP8 blocks are not supported (load them dequantized)", kOp);
  check_vector(kOp, "ids", ids, DType::i32, -1);
  const int64_t n = ids.size(0);
  check_shape(kOp, "out", out, Shape{n, table.k});
  check_float(kOp, "out", out);
  check_rows_contiguous(kOp, "out", out);
  check_on_device(kOp, "ids", ids, ctx);
  check_on_device(kOp, "out", out, ctx);
  if (n == 0 || table.k == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::gather_rows_blocks(ctx, table, ids, out));
  } else {
    const int32_t* id = ids.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      DSPARK_CHECK_KIND(invalid_input, id[i] >= 0 && id[i] < table.n,
                        "{}: ids[{}] = {} is outside the table's {} rows", kOp, i, id[i], table.n);
    cpu::gather_rows_blocks(ctx, table, ids, out);
  }
}

}  // namespace dspark
