// The stream-K few-rows linear path (backend/cuda/kernels/gemv_streamk.cu: 1-48 rows of x, 16-bit
// weights, N % 64 == 0, K % 128 == 0; sm_90) against the CPU on the same rounded inputs: every
// token tile count (M 1, 2, 5, 8, 9, 16, 17, 24, 33, 48), grids of one CTA and of many, CTA ranges
// inside one tile (up to 96 CTAs adding into one tile), ranges over several tiles, the Qwen3-8B
// verify shapes (q/k/v, o, down), both output dtypes, a bias, strided x and y; then K blocks of
// 256 (cuda::set_streamk_block_k, a measurement switch) on the shapes whose K allows them; shapes
// it does not take (N % 64, K % 128) through cuBLASLt. Then its own properties: the same bits on
// every call, a chain of calls where each reads the previous one's output (the programmatic launch:
// x is read only after the wait), and the switch.
#include <cstring>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"
#include "cuda/linear_paths.h"

namespace dspark::test {
namespace {

using StreamKCase = LinearCase;

TEST(CudaGemvStreamK, FewRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  // The one-row kernel off (M = 1 comes here), the few-rows kernel off, the stream-K kernel on.
  const ScopedLinearPaths only_streamk(false, false, true);
  Contexts ctx;
  uint32_t seed = 9700;
  // {2, 128, 64}: one item, one CTA. {5, 256, 128}: 4 items on 4 CTAs, two per tile.
  // {9, 12288, 64}: 96 items on 96 CTAs adding into one tile. {17, 4096, 4160}: 65 tiles of 32
  // items on the whole grid (ranges over 2-3 tiles). {1, 4096, 4096}, {17, 4096, 6144 / 4096},
  // {17, 12288, 4096}: the Qwen3-8B q/k/v, o and down at decode and verify 16. {33, 1024, 4096},
  // {48, 2048, 1024}, {24, 512, 8192}, {16, 1024, 192}, {8, 384, 640}: other token tile counts.
  const StreamKCase cases[] = {
      {2, 128, 64},     {5, 256, 128},    {9, 12288, 64},    {17, 4096, 4160}, {1, 4096, 4096},
      {17, 4096, 6144}, {17, 4096, 4096}, {17, 12288, 4096}, {33, 1024, 4096}, {48, 2048, 1024},
      {24, 512, 8192},  {16, 1024, 192},  {8, 384, 640},     {5, 4096, 12288}};
  for (DType in : {DType::bf16, DType::f16})
    for (DType out : {in, DType::f32})
      for (const StreamKCase& s : cases)
        expect_linear_case(ctx, in, out, s, s.m % 2 == 1, seed, "stream-K");
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  // K blocks of 256 (four TMA boxes per item) where K % 256 == 0, 128 elsewhere.
  const int saved_bk = cuda::streamk_block_k();
  cuda::set_streamk_block_k(256);
  for (const StreamKCase& s : cases)
    expect_linear_case(ctx, DType::bf16, DType::f32, s, true, seed, "stream-K, K 256");
  cuda::set_streamk_block_k(saved_bk);
#endif
  // Shapes the kernel does not take (cuBLASLt answers): N % 64 != 0, K % 128 != 0, M > 48.
  for (const StreamKCase& s :
       {StreamKCase{17, 4096, 4099}, StreamKCase{17, 1032, 64}, StreamKCase{49, 1024, 256}})
    expect_linear_case(ctx, DType::bf16, DType::bf16, s, true, seed, "not taken");
}

// x and y as column ranges of wider tensors (row strides K + 256 and N + 64).
TEST(CudaGemvStreamK, StridedRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  const ScopedLinearPaths only_streamk(false, false, true);
  Contexts ctx;
  const int64_t m = 17, k = 1024, n = 2048;
  const Pair xw = random_pair(DType::bf16, Shape{m, k + 256}, 9800);
  const Pair w = random_pair(DType::bf16, Shape{n, k}, 9801, 0.05f);
  const Pair yw = zeros_pair(DType::bf16, Shape{m, n + 64});
  const Tensor no_bias;
  linear(ctx.cpu, columns(xw.cpu, 128, k), w.cpu, no_bias, columns(yw.cpu, 64, n));
  linear(ctx.gpu, columns(xw.gpu, 128, k), w.gpu, no_bias, columns(yw.gpu, 64, n));
  ctx.gpu.synchronize();
  expect_close(yw.gpu, yw.cpu, tolerance(DType::bf16), "strided x and y");
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // properties of the CUDA kernel itself
// Two calls give the same bits (ranges across tiles, partial tiles merged by arrival); the switch
// off routes through cuBLASLt (the same values within rounding).
TEST(CudaGemvStreamK, DeterministicAndSwitchable) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  for (const StreamKCase& s : {StreamKCase{17, 4096, 6144}, StreamKCase{17, 12288, 4096}}) {
    const Pair x = random_pair(DType::bf16, Shape{s.m, s.k}, 9900);
    const Pair w = random_pair(DType::bf16, Shape{s.n, s.k}, 9901, 0.05f);
    const Pair a = zeros_pair(DType::f32, Shape{s.m, s.n}),
               b = zeros_pair(DType::f32, Shape{s.m, s.n});
    const Pair c = zeros_pair(DType::f32, Shape{s.m, s.n});
    {
      const ScopedLinearPaths only_streamk(false, false, true);
      linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, a.gpu);
      linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, b.gpu);
    }
    {
      const ScopedLinearPaths cublas_only(false, false, false);
      linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, c.gpu);
    }
    ctx.gpu.synchronize();
    const OwnedTensor ha = OwnedTensor::copy_of(a.gpu.view(), Device::cpu());
    const OwnedTensor hb = OwnedTensor::copy_of(b.gpu.view(), Device::cpu());
    EXPECT_EQ(0, std::memcmp(ha.view().data(), hb.view().data(),
                             static_cast<size_t>(s.m * s.n) * sizeof(float)))
        << "two calls of the stream-K kernel differ, " << case_name(s);
    expect_close(a.gpu, c.gpu, 1e-4, "stream-K vs cuBLASLt, " + case_name(s));
  }
}

// Eight calls in a row, each multiplying the previous call's output (a programmatic dependent
// launched while the previous call still runs: it may copy weights early, x only after its wait),
// against the same chain on the CPU.
TEST(CudaGemvStreamK, ChainedCallsReadThePreviousOutput) {
  DSPARK_REQUIRE_CUDA();
  const ScopedLinearPaths only_streamk(false, false, true);
  Contexts ctx;
  const int64_t m = 17, d = 1024;
  const Pair x = random_pair(DType::f16, Shape{m, d}, 9950);
  std::vector<Pair> w, y;
  for (int i = 0; i < 8; ++i) {
    w.push_back(random_pair(DType::f16, Shape{d, d}, 9951 + static_cast<uint32_t>(i), 0.03f));
    y.push_back(zeros_pair(DType::f16, Shape{m, d}));
  }
  const Tensor no_bias;
  for (int i = 0; i < 8; ++i) {
    linear(ctx.cpu, i == 0 ? x.cpu.view() : y[i - 1].cpu.view(), w[i].cpu, no_bias, y[i].cpu);
    linear(ctx.gpu, i == 0 ? x.gpu.view() : y[i - 1].gpu.view(), w[i].gpu, no_bias, y[i].gpu);
  }
  ctx.gpu.synchronize();
  // Each step rounds to f16 on both sides from slightly different sums: the error grows along the
  // chain, well inside 8 times one step's.
  expect_close(y.back().gpu, y.back().cpu, 8 * tolerance(DType::f16), "end of the chain");
}
#endif

}  // namespace
}  // namespace dspark::test
