// gather_rows: CUDA vs CPU (exact: a row copy with the same f32 -> dtype rounding on both).
#include "dspark/ops/embedding.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

TEST(CudaEmbedding, GatherRowsMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t vocab = 517, n = 33;
  const Pair ids = vector_pair(random_ints(n, 0, vocab - 1, 7), Shape{n});
  uint32_t seed = 1;
  for (DType table_dtype : kFloatDTypes) {
    for (DType out_dtype : kFloatDTypes) {
      for (int64_t h : {1, 7, 64, 1000, 4096}) {
        const Pair table = random_pair(table_dtype, Shape{vocab, h}, seed++);
        const Pair out = zeros_pair(out_dtype, Shape{n, h});
        embedding(ctx.cpu, table.cpu, ids.cpu, out.cpu);
        embedding(ctx.gpu, table.gpu, ids.gpu, out.gpu);
        ctx.gpu.synchronize();
        expect_equal(
            out.gpu, out.cpu,
            name_of(table_dtype) + " -> " + name_of(out_dtype) + " H=" + std::to_string(h));
      }
    }
  }
}

// Table rows and output rows inside wider buffers (row strides > H, unaligned offsets): the
// columns outside the views must stay untouched.
TEST(CudaEmbedding, StridedTableAndOutput) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t vocab = 100, n = 9, h = 24;
  const Pair ids = vector_pair(random_ints(n, 0, vocab - 1, 3), Shape{n});
  for (DType dtype : kFloatDTypes) {
    const Pair table = random_pair(dtype, Shape{vocab, h + 5}, 11);
    const Pair out = random_pair(dtype, Shape{n, h + 3}, 12);
    gather_rows(ctx.cpu, columns(table.cpu, 1, h), ids.cpu, columns(out.cpu, 3, h));
    gather_rows(ctx.gpu, columns(table.gpu, 1, h), ids.gpu, columns(out.gpu, 3, h));
    ctx.gpu.synchronize();
    expect_equal(out.gpu, out.cpu, "strided " + name_of(dtype));
  }
}

// CUDA does not read ids back to the host: out-of-range ids give zero rows (ops/embedding.h).
TEST(CudaEmbedding, OutOfRangeIdsGiveZeros) {
  DSPARK_REQUIRE_CUDA();
  if (!kTestGpu.is_cuda()) GTEST_SKIP() << "CUDA-only behaviour (the CPU rejects such ids)";
  Contexts ctx;
  const int64_t vocab = 10, h = 16;
  const Pair table = random_pair(DType::bf16, Shape{vocab, h}, 5);
  const std::vector<int32_t> ids_host = {3, -1, 10, 1 << 30, 9};
  const Pair ids = vector_pair(ids_host, Shape{5});
  const Pair out = random_pair(DType::f32, Shape{5, h}, 6);
  gather_rows(ctx.gpu, table.gpu, ids.gpu, out.gpu);
  ctx.gpu.synchronize();
  const std::vector<float> got = read(out.gpu), rows = read(table.cpu);
  for (size_t r = 0; r < ids_host.size(); ++r) {
    const bool valid = ids_host[r] >= 0 && ids_host[r] < vocab;
    for (int64_t c = 0; c < h; ++c) {
      const float expected = valid ? rows[static_cast<size_t>(ids_host[r] * h + c)] : 0.0f;
      EXPECT_EQ(got[r * h + static_cast<size_t>(c)], expected) << "row " << r << " col " << c;
    }
  }
}

}  // namespace
}  // namespace dspark::test
