// swiglu, add, convert: CUDA vs CPU over dtype combinations, odd sizes and strided views.
#include "dspark/ops/activation.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct Size {
  int64_t n, d;
};
constexpr Size kSizes[] = {{1, 1}, {5, 11}, {16, 3072}, {3, 12289}};

// gate and up are the two halves of one fused [n, 2I] projection (row stride 2I).
TEST(CudaActivation, SwigluMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1;
  for (DType in : kFloatDTypes) {
    for (DType out_dtype : {in, DType::f32}) {
      for (const Size s : kSizes) {
        const Pair fused = random_pair(in, Shape{s.n, 2 * s.d}, seed++, 3.0f);
        const Pair out = zeros_pair(out_dtype, Shape{s.n, s.d});
        swiglu(ctx.cpu, columns(fused.cpu, 0, s.d), columns(fused.cpu, s.d, s.d), out.cpu);
        swiglu(ctx.gpu, columns(fused.gpu, 0, s.d), columns(fused.gpu, s.d, s.d), out.gpu);
        ctx.gpu.synchronize();
        expect_close(out.gpu, out.cpu, tolerance(out_dtype),
                     name_of(in) + " -> " + name_of(out_dtype) + " [" + std::to_string(s.n) + ", " +
                         std::to_string(s.d) + "]");
      }
    }
  }
}

TEST(CudaActivation, SwigluMixedDtypes) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Pair gate = random_pair(DType::f32, Shape{4, 100}, 10);
  const Pair up = random_pair(DType::bf16, Shape{4, 100}, 11);
  const Pair out = zeros_pair(DType::f16, Shape{4, 100});
  swiglu(ctx.cpu, gate.cpu, up.cpu, out.cpu);
  swiglu(ctx.gpu, gate.gpu, up.gpu, out.gpu);
  ctx.gpu.synchronize();
  expect_close(out.gpu, out.cpu, tolerance(DType::f16), "f32 x bf16 -> f16");
}

// Element-wise sums round once from an exact f32 sum: identical on both backends.
TEST(CudaActivation, AddMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 100;
  for (DType a_dtype : kFloatDTypes) {
    for (DType b_dtype : kFloatDTypes) {
      for (const Size s : kSizes) {
        const Pair a = random_pair(a_dtype, Shape{s.n, s.d}, seed++);
        const Pair b = random_pair(b_dtype, Shape{s.n, s.d}, seed++);
        const Pair out = zeros_pair(a_dtype, Shape{s.n, s.d});
        add(ctx.cpu, a.cpu, b.cpu, out.cpu);
        add(ctx.gpu, a.gpu, b.gpu, out.gpu);
        // and in place: a += b
        add(ctx.cpu, a.cpu, b.cpu, a.cpu);
        add(ctx.gpu, a.gpu, b.gpu, a.gpu);
        ctx.gpu.synchronize();
        const std::string what = name_of(a_dtype) + " + " + name_of(b_dtype) + " [" +
                                 std::to_string(s.n) + ", " + std::to_string(s.d) + "]";
        expect_equal(out.gpu, out.cpu, what);
        expect_equal(a.gpu, a.cpu, what + " in place");
      }
    }
  }
}

TEST(CudaActivation, ConvertIsExact) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 200;
  for (DType src_dtype : kFloatDTypes) {
    for (DType out_dtype : kFloatDTypes) {
      for (const Size s : kSizes) {
        // Wide range: f16 overflow to inf and subnormals are part of the contract too.
        const Pair src = random_pair(src_dtype, Shape{s.n, s.d}, seed++, 3000.0f);
        const Pair out = zeros_pair(out_dtype, Shape{s.n, s.d});
        convert(ctx.cpu, src.cpu, out.cpu);
        convert(ctx.gpu, src.gpu, out.gpu);
        ctx.gpu.synchronize();
        expect_equal(out.gpu, out.cpu, name_of(src_dtype) + " -> " + name_of(out_dtype));
      }
    }
  }
  // Small values: f16 subnormals.
  const Pair tiny = random_pair(DType::f32, Shape{3, 333}, 7, 1e-5f);
  const Pair out = zeros_pair(DType::f16, Shape{3, 333});
  convert(ctx.cpu, tiny.cpu, out.cpu);
  convert(ctx.gpu, tiny.gpu, out.gpu);
  ctx.gpu.synchronize();
  expect_equal(out.gpu, out.cpu, "f32 -> f16 subnormals");
}

TEST(CudaActivation, ConvertStrided) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Pair src = random_pair(DType::f32, Shape{9, 70}, 300);
  const Pair out = random_pair(DType::bf16, Shape{9, 67}, 301);
  convert(ctx.cpu, columns(src.cpu, 3, 60), columns(out.cpu, 1, 60));
  convert(ctx.gpu, columns(src.gpu, 3, 60), columns(out.gpu, 1, 60));
  ctx.gpu.synchronize();
  expect_equal(out.gpu, out.cpu, "strided convert");
}

}  // namespace
}  // namespace dspark::test
