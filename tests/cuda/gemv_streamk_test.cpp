// The stream-K few-rows linear path (backend/cuda/kernels/gemv_streamk.cu: 1-48 rows of x, 16-bit
// weights, K % 8 == 0; compute capability 9.0) against the CPU on the same rounded inputs: every
// token tile count (M 1, 2, 5, 8, 9, 16, 17, 24, 33, 48), grids of one CTA and of many, CTA ranges
// inside one tile (the whole grid adding into one tile), ranges over several tiles, a last tile of
// 64 rows (its second weight box not loaded), N and K that are not multiples of the tile (the
// boxes past them read zeros), the Qwen3-8B verify shapes (q/k/v, o, down), both output dtypes, a
// bias, strided x and y; M > 48 through cuBLASLt. Each case checks that the kernel ran
// (cuda::streamk_linear_launches). Then its own properties: the same bits on every call, a chain of
// calls where each reads the previous one's output (the programmatic launch: x is read only after
// the wait), and the switch.
#include <cstring>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/matmul.h"

#include "cuda/cuda_consistency.h"
#include "cuda/linear_paths.h"

namespace dspark::test {
namespace {

using StreamKCase = LinearCase;

// Runs one case and, on a GPU of compute capability 9.0, checks that the stream-K kernel took it
// (`taken`) or left it (`!taken`) to cuBLASLt.
void expect_streamk_case(Contexts& ctx, DType in, DType out, const StreamKCase& s, bool bias,
                         uint32_t& seed, const std::string& what, bool taken = true) {
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  const uint64_t before = cuda::streamk_linear_launches();
#endif
  expect_linear_case(ctx, in, out, s, bias, seed, what);
#if !defined(DSPARK_CONSISTENCY_ON_CPU)
  if (cuda::streamk_linear_available()) {
    EXPECT_EQ(cuda::streamk_linear_launches() - before, taken ? 1u : 0u)
        << what << ": the stream-K kernel " << (taken ? "did not run" : "ran") << ", "
        << case_name(s);
  }
#endif
}

TEST(CudaGemvStreamK, FewRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  // The one-row kernel off (M = 1 comes here), the few-rows kernel off, the stream-K kernel on.
  const ScopedLinearPaths only_streamk(false, false, true);
  Contexts ctx;
  uint32_t seed = 9700;
  // {2, 128, 64}: one item, one CTA, half a tile. {5, 256, 192}: 8 items, a last tile of 64 rows.
  // {9, 12288, 64}: 192 items on the whole grid, all adding into one tile. {17, 4096, 4160}: 33
  // tiles of 64 items (ranges over 1-2 tiles). {1, 4096, 4096}, {17, 4096, 6144 / 4096},
  // {17, 12288, 4096}: the Qwen3-8B q/k/v, o and down at decode and verify 16. {33, 1024, 4096},
  // {48, 2048, 1024}, {24, 512, 8192}, {16, 1024, 192}, {8, 384, 640}, {5, 4096, 12288}: other
  // token tile counts. {17, 4096, 4099}: N past a box; {17, 1032, 72}: K past a box.
  const StreamKCase cases[] = {
      {2, 128, 64},     {5, 256, 192},    {9, 12288, 64},   {17, 4096, 4160},
      {1, 4096, 4096},  {17, 4096, 6144}, {17, 4096, 4096}, {17, 12288, 4096},
      {33, 1024, 4096}, {48, 2048, 1024}, {24, 512, 8192},  {16, 1024, 192},
      {8, 384, 640},    {5, 4096, 12288}, {17, 4096, 4099}, {17, 1032, 72}};
  for (DType in : {DType::bf16, DType::f16})
    for (DType out : {in, DType::f32})
      for (const StreamKCase& s : cases)
        expect_streamk_case(ctx, in, out, s, s.m % 2 == 1, seed, "stream-K");
  // M > 48: cuBLASLt answers.
  expect_streamk_case(ctx, DType::bf16, DType::bf16, StreamKCase{49, 1024, 256}, true, seed,
                      "not taken", false);
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
      const uint64_t before = cuda::streamk_linear_launches();
      linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, a.gpu);
      linear(ctx.gpu, x.gpu, w.gpu, Tensor{}, b.gpu);
      if (cuda::streamk_linear_available()) {
        EXPECT_EQ(cuda::streamk_linear_launches() - before, 2u) << case_name(s);
      }
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
