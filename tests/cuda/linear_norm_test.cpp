// linear_add_rms_norm (ops/linear_norm.h): CUDA against the CPU's linear + add_rms_norm. The K
// split (backend/cuda/kernels/linear_norm.cu: a strided-batch GEMM into f32 partial sums added by
// add_rms_norm's one-pass kernel; choose_linear_norm_splits in backend/cuda/policy/linear.h takes
// it for these cases) for 2, 3 and 4 splits (Tuning::linear_norm_splits), 2-48 rows, a verify
// step's o and down shapes, 16-bit inputs with f32 and 16-bit outputs, x with a row stride wider
// than K, and through every norm cluster size. Then the calls it declines (one row, more rows than
// the limit, K not a multiple of 8 S, a 16-bit y or residual, the split off), which take linear +
// add_rms_norm with the same bits as those two ops; then the same bits on every call, and the
// residual copy (a tap) with y as scratch (LinearNormExtras).
#include "dspark/ops/linear_norm.h"

#include <string>

#include "dspark/backend/cuda/policy/device.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/norm.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct NormCase {
  int splits;
  int64_t m, k, n;
};

// The K split's slice count and row limit (Tuning::linear_norm_splits, linear_norm_max_rows) of
// a context for a scope.
class ScopedNormSplits {
 public:
  ScopedNormSplits(Context& ctx, int splits, int max_rows = 48)
      : splits_(ctx, &cuda::Tuning::linear_norm_splits, splits),
        max_rows_(ctx, &cuda::Tuning::linear_norm_max_rows, max_rows) {}

 private:
  ScopedTuning<int> splits_, max_rows_;
};

// The op's operands on both devices: x is the first K columns of a [M, K + 8] matrix.
struct Operands {
  Pair wide, w, y, residual, weight, out;
  Tensor x_cpu, x_gpu;
};

Operands make_operands(DType in, DType y_dtype, DType res_dtype, DType out_dtype, int64_t m,
                       int64_t k, int64_t n, uint32_t seed) {
  Operands o{random_pair(in, Shape{m, k + 8}, seed),
             random_pair(in, Shape{n, k}, seed + 1, 0.05f),
             zeros_pair(y_dtype, Shape{m, n}),
             random_pair(res_dtype, Shape{m, n}, seed + 2),
             random_pair(DType::f32, Shape{n}, seed + 3, 0.5f),
             zeros_pair(out_dtype, Shape{m, n}),
             {},
             {}};
  o.x_cpu = o.wide.cpu.view().slice(1, 0, k);
  o.x_gpu = o.wide.gpu.view().slice(1, 0, k);
  return o;
}

const RmsNormParams kParams{1e-6f, false};

void run_both(Contexts& ctx, const Operands& o) {
  linear_add_rms_norm(ctx.cpu, o.x_cpu, o.w.cpu, o.y.cpu, o.residual.cpu, o.weight.cpu, o.out.cpu,
                      kParams);
  linear_add_rms_norm(ctx.gpu, o.x_gpu, o.w.gpu, o.y.gpu, o.residual.gpu, o.weight.gpu, o.out.gpu,
                      kParams);
  ctx.gpu.synchronize();
}

TEST(CudaLinearNorm, KSplitMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  // A verify step's o (4096 x 4096) and down (4096 x 12288) at 17 and 33 rows; small shapes for
  // every split count; 48 rows (the limit).
  const NormCase cases[] = {{2, 17, 4096, 4096}, {2, 33, 12288, 4096}, {2, 2, 256, 64},
                            {3, 5, 384, 96},     {4, 17, 512, 264},    {4, 48, 1024, 128},
                            {3, 9, 12288, 4096}, {2, 4, 4096, 4096}};
  uint32_t seed = 700;
  for (DType in : {DType::bf16, DType::f16}) {
    for (DType out_dtype : {in, DType::f32}) {
      for (const NormCase& c : cases) {
        const ScopedNormSplits splits(ctx.gpu, c.splits);
        const DType res = DType::f32;
        const Operands o = make_operands(in, DType::f32, res, out_dtype, c.m, c.k, c.n, seed);
        seed += 4;
        run_both(ctx, o);
        const std::string what = "S=" + std::to_string(c.splits) + " " + name_of(in) + " out " +
                                 name_of(out_dtype) + " M=" + std::to_string(c.m) +
                                 " K=" + std::to_string(c.k) + " N=" + std::to_string(c.n);
        expect_close(o.y.gpu, o.y.cpu, 1e-4, what + " y");
        expect_close(o.residual.gpu, o.residual.cpu, 1e-5, what + " residual");
        expect_close(o.out.gpu, o.out.cpu, tolerance(out_dtype), what + " out");
      }
    }
  }
}

// The split sums through every norm cluster size (Tuning::norm_cluster_ctas; norm.cu: on sm_90 a
// cluster of CTAs shares each row of at most 64 when the norm's launch is a plain one, as after
// the split's cuBLASLt GEMM): a verify's o and down shapes and a small odd one.
TEST(CudaLinearNorm, KSplitWithClusteredNormMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const NormCase cases[] = {{2, 17, 4096, 4096}, {3, 33, 12288, 4096}, {2, 5, 384, 100}};
  uint32_t seed = 760;
  for (const int ctas : {1, 2, 4, 8}) {
    const ScopedTuning<int> cluster(ctx.gpu, &cuda::Tuning::norm_cluster_ctas, ctas);
    for (const NormCase& c : cases) {
      const ScopedNormSplits splits(ctx.gpu, c.splits);
      const Operands o =
          make_operands(DType::bf16, DType::f32, DType::f32, DType::bf16, c.m, c.k, c.n, seed);
      seed += 4;
      run_both(ctx, o);
      const std::string what =
          std::to_string(ctas) + " CTAs per row, S=" + std::to_string(c.splits) +
          " M=" + std::to_string(c.m) + " K=" + std::to_string(c.k) + " N=" + std::to_string(c.n);
      expect_close(o.y.gpu, o.y.cpu, 1e-4, what + " y");
      expect_close(o.residual.gpu, o.residual.cpu, 1e-5, what + " residual");
      expect_close(o.out.gpu, o.out.cpu, tolerance(DType::bf16), what + " out");
    }
  }
}

// Calls the split declines go through linear then add_rms_norm on the GPU: the same bits as
// those two ops there.
TEST(CudaLinearNorm, DeclinedCallsEqualLinearThenAddRmsNorm) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  struct Declined {
    int splits;
    int64_t m, k;
    DType y, residual;
    const char* why;
    int max_rows = 48;
  };
  const Declined cases[] = {
      {2, 1, 512, DType::f32, DType::f32, "one row"},
      {2, 49, 512, DType::f32, DType::f32, "more rows than the limit"},
      {2, 17, 512, DType::f32, DType::f32, "more rows than a limit of 16", 16},
      {4, 8, 40, DType::f32, DType::f32, "K not a multiple of 8 S"},
      {2, 8, 512, DType::bf16, DType::f32, "a 16-bit y"},
      {2, 8, 512, DType::f32, DType::bf16, "a 16-bit residual"},
      {0, 8, 512, DType::f32, DType::f32, "the split off"}};
  uint32_t seed = 800;
  for (const Declined& c : cases) {
    const ScopedNormSplits guard(ctx.gpu, c.splits, c.max_rows);
    const int64_t n = 128;
    const Operands o = make_operands(DType::bf16, c.y, c.residual, DType::bf16, c.m, c.k, n, seed);
    seed += 4;
    // The reference: the two ops on the GPU, on copies of the same inputs.
    const OwnedTensor res_ref = OwnedTensor::copy_of(o.residual.gpu.view(), kTestGpu);
    const OwnedTensor y_ref = OwnedTensor::zeros(c.y, Shape{c.m, n}, kTestGpu);
    const OwnedTensor out_ref = OwnedTensor::zeros(DType::bf16, Shape{c.m, n}, kTestGpu);
    linear(ctx.gpu, o.x_gpu, o.w.gpu, Tensor{}, y_ref);
    add_rms_norm(ctx.gpu, res_ref, y_ref, o.weight.gpu, out_ref, kParams);
    run_both(ctx, o);
    expect_equal(o.y.gpu, y_ref, std::string(c.why) + " y");
    expect_equal(o.residual.gpu, res_ref, std::string(c.why) + " residual");
    expect_equal(o.out.gpu, out_ref, std::string(c.why) + " out");
    expect_close(o.out.gpu, o.out.cpu, tolerance(DType::bf16), std::string(c.why) + " vs CPU");
  }
}

// LinearNormExtras: the residual's copy (a model's tap) and y as scratch. On the GPU the copy has
// the bits of convert(residual) after the op and residual / out the bits of the call without
// extras: from the split's norm kernel (a bf16 copy of an f32 residual), else from a convert after
// it (an f32 copy; a declined call). The CPU's copy matches too.
TEST(CudaLinearNorm, ResidualCopyAndScratchYMatchTheOps) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  struct CopyCase {
    int splits;
    int64_t m, k, n;
    DType copy;
  };
  // The K split runs for the first four (the copy from its norm kernel for a bf16 copy), not for
  // one row or with the split off.
  const CopyCase cases[] = {{2, 17, 4096, 4096, DType::bf16}, {2, 33, 12288, 4096, DType::bf16},
                            {3, 5, 384, 100, DType::bf16},    {2, 17, 512, 256, DType::f32},
                            {2, 1, 512, 256, DType::bf16},    {0, 8, 512, 256, DType::bf16}};
  uint32_t seed = 950;
  for (const CopyCase& c : cases) {
    const ScopedNormSplits guard(ctx.gpu, c.splits);
    const Operands o =
        make_operands(DType::bf16, DType::f32, DType::f32, DType::bf16, c.m, c.k, c.n, seed);
    seed += 4;
    const std::string what = "S=" + std::to_string(c.splits) + " M=" + std::to_string(c.m) +
                             " N=" + std::to_string(c.n) + " copy " + name_of(c.copy);
    // The reference: the call without extras, then convert, on copies of the same inputs.
    const OwnedTensor res_ref = OwnedTensor::copy_of(o.residual.gpu.view(), kTestGpu);
    const OwnedTensor y_ref = OwnedTensor::zeros(DType::f32, Shape{c.m, c.n}, kTestGpu);
    const OwnedTensor out_ref = OwnedTensor::zeros(DType::bf16, Shape{c.m, c.n}, kTestGpu);
    const OwnedTensor copy_ref = OwnedTensor::zeros(c.copy, Shape{c.m, c.n}, kTestGpu);
    linear_add_rms_norm(ctx.gpu, o.x_gpu, o.w.gpu, y_ref, res_ref, o.weight.gpu, out_ref, kParams);
    convert(ctx.gpu, res_ref, copy_ref);
    const Pair copy = zeros_pair(c.copy, Shape{c.m, c.n});
    linear_add_rms_norm(ctx.cpu, o.x_cpu, o.w.cpu, o.y.cpu, o.residual.cpu, o.weight.cpu, o.out.cpu,
                        kParams, LinearNormExtras{copy.cpu, false});
    linear_add_rms_norm(ctx.gpu, o.x_gpu, o.w.gpu, o.y.gpu, o.residual.gpu, o.weight.gpu, o.out.gpu,
                        kParams, LinearNormExtras{copy.gpu, false});
    ctx.gpu.synchronize();
    expect_equal(copy.gpu, copy_ref, what + " copy");
    expect_equal(o.residual.gpu, res_ref, what + " residual");
    expect_equal(o.out.gpu, out_ref, what + " out");
    expect_close(copy.gpu, copy.cpu, tolerance(c.copy), what + " copy vs CPU");
  }
}

// The split's results do not change from call to call (the partial sums are added in K order).
TEST(CudaLinearNorm, SameBitsOnEveryCall) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const ScopedNormSplits guard(ctx.gpu, 2);
  const int64_t m = 17, k = 4096, n = 4096;
  const Operands o = make_operands(DType::bf16, DType::f32, DType::f32, DType::bf16, m, k, n, 900);
  const OwnedTensor res0 = OwnedTensor::copy_of(o.residual.gpu.view(), kTestGpu);
  OwnedTensor first_out, first_res;
  for (int call = 0; call < 3; ++call) {
    const OwnedTensor res = OwnedTensor::copy_of(res0.view(), kTestGpu);
    linear_add_rms_norm(ctx.gpu, o.x_gpu, o.w.gpu, o.y.gpu, res, o.weight.gpu, o.out.gpu, kParams);
    ctx.gpu.synchronize();
    if (call == 0) {
      first_out = OwnedTensor::copy_of(o.out.gpu.view(), kTestGpu);
      first_res = OwnedTensor::copy_of(res.view(), kTestGpu);
      continue;
    }
    expect_equal(o.out.gpu, first_out, "out, call " + std::to_string(call));
    expect_equal(res, first_res, "residual, call " + std::to_string(call));
  }
}

}  // namespace
}  // namespace dspark::test
