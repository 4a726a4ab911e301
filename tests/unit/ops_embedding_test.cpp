// gather_rows against a direct element copy (exact: a gather only converts dtype).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/embedding.h"

namespace dspark {
namespace {

using test::random_tensor;

// The value `v` after a round trip through `dtype` (what a converting copy must produce).
using test::rounded;

TEST(OpsEmbedding, GatherRowsAllDtypesAndWidths) {
  Context ctx(Device::cpu());
  const int64_t vocab = 37;
  for (int64_t h : {1, 3, 17, 127, 4099}) {
    for (DType table_dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (DType out_dtype : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE(
            fmt::format("H={} table={} out={}", h, dtype_name(table_dtype), dtype_name(out_dtype)));
        OwnedTensor table = random_tensor(table_dtype, Shape{vocab, h}, 11);
        std::vector<int32_t> ids = {0, 36, 5, 5, 17, 0, 23, 36, 1};
        OwnedTensor id_t = OwnedTensor::from_vector(ids, Shape{9}, Device::cpu());
        // Output rows strided (a slice of a wider buffer).
        OwnedTensor out_buf = OwnedTensor::zeros(out_dtype, Shape{9, h + 5}, Device::cpu());
        Tensor out = out_buf.view().slice(1, 0, h);
        gather_rows(ctx, table, id_t, out);
        const std::vector<float> tv = to_f32_vector(table);
        const std::vector<float> ov = to_f32_vector(out);
        for (size_t i = 0; i < ids.size(); ++i)
          for (int64_t j = 0; j < h; ++j)
            ASSERT_EQ(ov[i * h + j], rounded(tv[ids[i] * h + j], out_dtype)) << i << "," << j;
      }
    }
  }
}

TEST(OpsEmbedding, EmptyIdsIsANoOp) {
  Context ctx(Device::cpu());
  OwnedTensor table = random_tensor(DType::f32, Shape{4, 8}, 1);
  OwnedTensor ids(DType::i32, Shape{0}, Device::cpu());
  OwnedTensor out(DType::f32, Shape{0, 8}, Device::cpu());
  EXPECT_NO_THROW(gather_rows(ctx, table, ids, out));
}

TEST(OpsEmbedding, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor table = random_tensor(DType::f32, Shape{4, 8}, 1);
  OwnedTensor out(DType::f32, Shape{2, 8}, Device::cpu());
  OwnedTensor bad_id =
      OwnedTensor::from_vector(std::vector<int32_t>{1, 4}, Shape{2}, Device::cpu());
  EXPECT_THROW(gather_rows(ctx, table, bad_id, out), Error);
  OwnedTensor neg_id =
      OwnedTensor::from_vector(std::vector<int32_t>{-1, 0}, Shape{2}, Device::cpu());
  EXPECT_THROW(gather_rows(ctx, table, neg_id, out), Error);
  OwnedTensor ids64 = OwnedTensor::from_vector(std::vector<int64_t>{1, 2}, Shape{2}, Device::cpu());
  EXPECT_THROW(gather_rows(ctx, table, ids64, out), Error);
  OwnedTensor ids = OwnedTensor::from_vector(std::vector<int32_t>{1, 2}, Shape{2}, Device::cpu());
  OwnedTensor wide(DType::f32, Shape{2, 9}, Device::cpu());
  EXPECT_THROW(gather_rows(ctx, table, ids, wide), Error);
  OwnedTensor int_out(DType::i32, Shape{2, 8}, Device::cpu());
  EXPECT_THROW(gather_rows(ctx, table, ids, int_out), Error);
  try {
    gather_rows(ctx, table, bad_id, out);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gather_rows"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dspark
