// The few-rows tensor-core linear path (backend/cuda/kernels/gemv_rows.cu: 1-32 rows of x, 16-bit
// weights, K % 8 == 0, K <= 4096, N <= 65,536; opt-in) against the CPU on the same rounded inputs:
// every token tile count (M up to 8, 16, 24, 32), K from one 16-byte chunk to 4096 (a partial last
// chunk, warps with an empty share, tiles of 16, 32 and 64 rows; a down projection's K = 12288
// goes to cuBLASLt, which must answer the same), N below, at and above a tile and past the grid's
// first pass; both output dtypes, with and without a bias; then with x read from global memory.
// Then its own properties: the same bits on every call (a fixed summation order) and the switch
// (off: cuBLASLt, within rounding).
#include <cstring>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"
#include "cuda/linear_paths.h"

namespace dspark::test {
namespace {

using RowsCase = LinearCase;

TEST(CudaGemvRows, FewRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  const bool saved = cuda::rows_linear_enabled();
  cuda::set_rows_linear(true);  // opt-in path
#endif
  Contexts ctx;
  uint32_t seed = 9300;
  // K 8: one partial chunk (64-row tiles, 4 warps per row group); 1032: a partial last chunk,
  // warps with no share (32-row tiles); 2048: 32-row tiles, 8 chunks per warp; 4096 (q/k/v, o):
  // 16-row tiles, 8 chunks per warp; 12288 (a down projection): cuBLASLt. M 24-32 at K 4096: x
  // does not fit the shared memory, cuBLASLt. N 1, 17 (a tile plus one row), 4099 (several passes
  // of the grid, a partial last tile).
  const RowsCase cases[] = {
      {2, 8, 17},        {5, 1032, 4099}, {8, 4096, 17},    {9, 4096, 4099},   {17, 4096, 1},
      {17, 4096, 4099},  {24, 1032, 17},  {32, 4096, 4099}, {17, 12288, 4099}, {3, 12288, 17},
      {32, 12288, 1031}, {1, 4096, 4099}, {6, 2048, 1031},  {20, 4096, 1031}};
  for (DType in : {DType::bf16, DType::f16})
    for (DType out : {in, DType::f32})
      for (const RowsCase& s : cases)
        expect_linear_case(ctx, in, out, s, s.n % 2 == 1, seed, "auto");
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  // x read from global memory in the MMA loop (no shared-memory copy: M = 32 at K = 4096 too).
  const bool saved_x = cuda::rows_linear_x_global();
  cuda::set_rows_linear_x_global(true);
  for (const RowsCase& s : {RowsCase{17, 4096, 4099}, RowsCase{32, 4096, 1031},
                            RowsCase{5, 1032, 17}, RowsCase{1, 4096, 4099}})
    expect_linear_case(ctx, DType::bf16, DType::f32, s, s.n % 2 == 1, seed, "x global");
  cuda::set_rows_linear_x_global(saved_x);
  cuda::set_rows_linear(saved);
#endif
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // properties of the CUDA kernel itself
// Two calls give the same bits (16- and 32-row tiles); the switch off routes through cuBLASLt (same
// values within rounding).
TEST(CudaGemvRows, DeterministicAndSwitchable) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const bool saved = cuda::rows_linear_enabled();
  const int64_t m = 17, n = 6144;
  for (int64_t k : {4096, 2048}) {  // both inside the kernel's K <= 4096 and x's shared memory
    const Pair x = random_pair(DType::bf16, Shape{m, k}, 9400);
    const Pair w = random_pair(DType::bf16, Shape{n, k}, 9401, 0.05f);
    const Pair a = zeros_pair(DType::f32, Shape{m, n}), b = zeros_pair(DType::f32, Shape{m, n});
    const Pair c = zeros_pair(DType::f32, Shape{m, n});
    cuda::set_rows_linear(true);
    linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, a.gpu);
    linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, b.gpu);
    cuda::set_rows_linear(false);
    linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, c.gpu);
    ctx.gpu.synchronize();
    const OwnedTensor ha = OwnedTensor::copy_of(a.gpu.view(), Device::cpu());
    const OwnedTensor hb = OwnedTensor::copy_of(b.gpu.view(), Device::cpu());
    EXPECT_EQ(0, std::memcmp(ha.view().data(), hb.view().data(), m * n * sizeof(float)))
        << "two calls of the few-rows kernel differ, K=" << k;
    expect_close(a.gpu, c.gpu, 1e-4, "few-rows kernel vs cuBLASLt, K=" + std::to_string(k));
  }
  cuda::set_rows_linear(saved);
}
#endif

}  // namespace
}  // namespace dspark::test
