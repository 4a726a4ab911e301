// rms_norm / add_rms_norm / layer_norm: CUDA vs CPU over dtypes, odd sizes, strided rows, in-place
// output, per-head [n, heads, D] views, and the (1 + w) variant.
#include "dspark/ops/norm.h"

#include <string>

#include "dspark/backend/cuda/policy/device.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

// CTAs per row of add_rms_norm's one-pass kernel on f32 rows (Tuning::norm_cluster_ctas: a
// cluster of them shares a row on sm_90; 1: one CTA per row) and whether programmatic launches
// take the clusters too (Tuning::norm_cluster_programmatic), for a scope.
class ScopedNormCluster {
 public:
  ScopedNormCluster(Context& ctx, int ctas, bool programmatic)
      : ctas_(ctx, &cuda::Tuning::norm_cluster_ctas, ctas),
        programmatic_(ctx, &cuda::Tuning::norm_cluster_programmatic, programmatic) {}

 private:
  ScopedTuning<int> ctas_;
  ScopedTuning<bool> programmatic_;
};

struct Size {
  int64_t n, d;
};
// add_rms_norm's rows in registers (norm.cu): 1 vector per thread ({64, 64}), 2 ({3, 1536}), 3
// in the 4-vector kernel ({2, 2560} f32), 4 ({4, 4096} f32); {2, 5000} takes the two-pass kernel.
constexpr Size kSizes[] = {{1, 1},    {3, 17},   {5, 128},  {64, 64},
                           {3, 1536}, {2, 2560}, {4, 4096}, {2, 5000}};

TEST(CudaNorm, RmsNormMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 100;
  for (DType x_dtype : kFloatDTypes) {
    for (DType out_dtype : {x_dtype, DType::f32}) {
      for (DType w_dtype : {x_dtype, DType::f32}) {
        for (const Size s : kSizes) {
          for (bool unit_offset : {false, true}) {
            const Pair x = random_pair(x_dtype, Shape{s.n, s.d}, seed++, 2.0f);
            const Pair w = random_pair(w_dtype, Shape{s.d}, seed++, 0.5f);
            const Pair out = zeros_pair(out_dtype, Shape{s.n, s.d});
            const RmsNormParams params{1e-6f, unit_offset};
            rms_norm(ctx.cpu, x.cpu, w.cpu, out.cpu, params);
            rms_norm(ctx.gpu, x.gpu, w.gpu, out.gpu, params);
            ctx.gpu.synchronize();
            expect_close(out.gpu, out.cpu, tolerance(out_dtype),
                         "x " + name_of(x_dtype) + " w " + name_of(w_dtype) + " out " +
                             name_of(out_dtype) + " [" + std::to_string(s.n) + ", " +
                             std::to_string(s.d) + "] unit_offset " + std::to_string(unit_offset));
          }
        }
      }
    }
  }
}

// Rows inside a wider buffer (unaligned row starts: the scalar path), normalised in place.
TEST(CudaNorm, RmsNormStridedInPlace) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  for (DType dtype : kFloatDTypes) {
    for (int64_t d : {8, 128, 1000}) {
      const int64_t n = 7;
      const Pair buf = random_pair(dtype, Shape{n, d + 13}, 200);
      const Pair w = random_pair(dtype, Shape{d}, 201);
      const RmsNormParams params{1e-5f, false};
      rms_norm(ctx.cpu, columns(buf.cpu, 5, d), w.cpu, columns(buf.cpu, 5, d), params);
      rms_norm(ctx.gpu, columns(buf.gpu, 5, d), w.gpu, columns(buf.gpu, 5, d), params);
      ctx.gpu.synchronize();
      expect_close(buf.gpu, buf.cpu, tolerance(dtype), "in place " + name_of(dtype));
    }
  }
}

// Per-head norms of the q part of a fused [n, (heads + 2) * D] projection: [n, heads, D] views.
TEST(CudaNorm, RmsNormPerHeadViews) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t n = 6, heads = 4, d = 64;
  for (DType dtype : kFloatDTypes) {
    const Pair buf = random_pair(dtype, Shape{n, (heads + 2) * d}, 300);
    const Pair w = random_pair(dtype, Shape{d}, 301);
    const Pair out = zeros_pair(dtype, Shape{n, heads, d});
    auto heads_view = [&](const Tensor& t) {
      return Tensor(t.data(), t.dtype(), Shape{n, heads, d}, Shape{(heads + 2) * d, d, 1},
                    t.device());
    };
    const RmsNormParams params{1e-6f, true};
    rms_norm(ctx.cpu, heads_view(buf.cpu), w.cpu, out.cpu, params);
    rms_norm(ctx.gpu, heads_view(buf.gpu), w.gpu, out.gpu, params);
    ctx.gpu.synchronize();
    expect_close(out.gpu, out.cpu, tolerance(dtype), "per head " + name_of(dtype));
  }
}

TEST(CudaNorm, AddRmsNormMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 400;
  for (DType act : kFloatDTypes) {
    for (DType res_dtype : {act, DType::f32}) {
      for (const Size s : kSizes) {
        const Pair residual = random_pair(res_dtype, Shape{s.n, s.d}, seed++, 3.0f);
        const Pair x = random_pair(act, Shape{s.n, s.d}, seed++);
        const Pair w = random_pair(act, Shape{s.d}, seed++, 0.5f);
        const Pair out = zeros_pair(act, Shape{s.n, s.d});
        const RmsNormParams params{1e-6f, s.d % 2 == 0};  // (1 + w) on some rows' kernels
        add_rms_norm(ctx.cpu, residual.cpu, x.cpu, w.cpu, out.cpu, params);
        add_rms_norm(ctx.gpu, residual.gpu, x.gpu, w.gpu, out.gpu, params);
        ctx.gpu.synchronize();
        const std::string what = "residual " + name_of(res_dtype) + " act " + name_of(act) + " [" +
                                 std::to_string(s.n) + ", " + std::to_string(s.d) + "]";
        // residual + x is exact in f32 and rounded once to the residual dtype on both backends.
        expect_equal(residual.gpu, residual.cpu, what + " residual");
        expect_close(out.gpu, out.cpu, tolerance(act), what + " out");
      }
    }
  }
}

// f32 residual and x rows of at most 64 rows take a cluster of CTAs per row (norm.cu, on sm_90;
// here also as programmatic launches, which by default keep one CTA per row): every cluster size
// against the CPU, with slices that do not divide the row evenly ({3, 100}: 25 vectors over 8
// CTAs), a CTA with no columns ({2, 12} over 4 and 8), one row (decode), a verify's 17 rows, 64
// rows (the limit) and 65 (one CTA per row again), 16-bit and f32 outputs.
TEST(CudaNorm, ClusteredRowsMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  constexpr Size kClusterSizes[] = {{1, 4096},  {17, 4096}, {3, 100}, {2, 12},
                                    {64, 1024}, {65, 512},  {5, 2560}};
  uint32_t seed = 450;
  for (const int ctas : {1, 2, 4, 8}) {
    const ScopedNormCluster guard(ctx.gpu, ctas, true);
    for (DType out_dtype : {DType::bf16, DType::f32}) {
      for (const Size s : kClusterSizes) {
        const Pair residual = random_pair(DType::f32, Shape{s.n, s.d}, seed++, 3.0f);
        const Pair x = random_pair(DType::f32, Shape{s.n, s.d}, seed++);
        const Pair w = random_pair(DType::bf16, Shape{s.d}, seed++, 0.5f);
        const Pair out = zeros_pair(out_dtype, Shape{s.n, s.d});
        const RmsNormParams params{1e-6f, s.n % 2 == 0};
        add_rms_norm(ctx.cpu, residual.cpu, x.cpu, w.cpu, out.cpu, params);
        add_rms_norm(ctx.gpu, residual.gpu, x.gpu, w.gpu, out.gpu, params);
        ctx.gpu.synchronize();
        const std::string what = std::to_string(ctas) + " CTAs per row, out " + name_of(out_dtype) +
                                 " [" + std::to_string(s.n) + ", " + std::to_string(s.d) + "]";
        expect_equal(residual.gpu, residual.cpu, what + " residual");
        expect_close(out.gpu, out.cpu, tolerance(out_dtype), what + " out");
      }
    }
  }
}

// The clustered rows give the same bits on every call, and the same bits for a row whatever the
// other rows of the call (decode's one row and a verify's rows share the kernel per row).
TEST(CudaNorm, ClusteredRowsSameBitsPerRow) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const ScopedNormCluster guard(ctx.gpu, 8, true);
  const int64_t n = 17, d = 4096;
  const Pair residual = random_pair(DType::f32, Shape{n, d}, 470, 3.0f);
  const Pair x = random_pair(DType::f32, Shape{n, d}, 471);
  const Pair w = random_pair(DType::bf16, Shape{d}, 472, 0.5f);
  const RmsNormParams params{1e-6f, false};
  const OwnedTensor all = OwnedTensor::zeros(DType::bf16, Shape{n, d}, kTestGpu);
  const OwnedTensor res_all = OwnedTensor::copy_of(residual.gpu.view(), kTestGpu);
  add_rms_norm(ctx.gpu, res_all, x.gpu, w.gpu, all, params);
  for (int call = 0; call < 2; ++call) {
    for (int64_t row : {int64_t{0}, n - 1}) {
      const OwnedTensor res_one =
          OwnedTensor::copy_of(residual.gpu.view().slice(0, row, row + 1), kTestGpu);
      const OwnedTensor x_one = OwnedTensor::copy_of(x.gpu.view().slice(0, row, row + 1), kTestGpu);
      const OwnedTensor one = OwnedTensor::zeros(DType::bf16, Shape{1, d}, kTestGpu);
      add_rms_norm(ctx.gpu, res_one, x_one, w.gpu, one, params);
      ctx.gpu.synchronize();
      const std::string what = "row " + std::to_string(row) + ", call " + std::to_string(call);
      expect_equal(one, all.view().slice(0, row, row + 1), what + " out");
      expect_equal(res_one, res_all.view().slice(0, row, row + 1), what + " residual");
    }
  }
}

// The default tuning: only plain launches take the clusters, so add_rms_norm after one of our
// kernels (a programmatic launch, with PDL on) keeps one CTA per row; the rows against the CPU.
// (After a cuBLASLt GEMM, a plain launch: CudaLinearNorm.KSplitWithClusteredNormMatchesCpu.)
TEST(CudaNorm, ProgrammaticLaunchesMatchCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const ScopedNormCluster guard(ctx.gpu, 8, false);
  const Pair residual = random_pair(DType::f32, Shape{17, 4096}, 480, 3.0f);
  const Pair x = random_pair(DType::f32, Shape{17, 4096}, 481);
  const Pair w = random_pair(DType::bf16, Shape{4096}, 482, 0.5f);
  const Pair out = zeros_pair(DType::bf16, Shape{17, 4096});
  const RmsNormParams params{1e-6f, false};
  add_rms_norm(ctx.cpu, residual.cpu, x.cpu, w.cpu, out.cpu, params);
  add_rms_norm(ctx.gpu, residual.gpu, x.gpu, w.gpu, out.gpu, params);  // warms up
  const Pair residual2 = random_pair(DType::f32, Shape{17, 4096}, 480, 3.0f);
  add_rms_norm(ctx.gpu, residual2.gpu, x.gpu, w.gpu, out.gpu, params);
  ctx.gpu.synchronize();
  expect_equal(residual2.gpu, residual.cpu, "residual");
  expect_close(out.gpu, out.cpu, tolerance(DType::bf16), "out");
}

// out aliasing x (allowed), rows inside wider buffers: unaligned (the two-pass kernel's scalar
// path) and 16-byte aligned (rows in registers, norm.cu).
TEST(CudaNorm, AddRmsNormAliasingXInWiderRows) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  struct Case {
    int64_t n, d, residual_begin, x_begin;
    DType w_dtype;
  };
  for (const Case c : {Case{5, 96, 8, 1, DType::f32}, Case{3, 4096, 64, 0, DType::bf16}}) {
    for (DType dtype : kFloatDTypes) {
      const std::string what = name_of(dtype) + " d " + std::to_string(c.d);
      const Pair residual = random_pair(dtype, Shape{c.n, c.d + 64}, 500, 3.0f);
      const Pair x = random_pair(dtype, Shape{c.n, c.d + 32}, 501);
      const Pair w = random_pair(c.w_dtype, Shape{c.d}, 502);
      const RmsNormParams params{1e-6f, true};
      for (Context* cx : {&ctx.cpu, &ctx.gpu}) {
        const bool gpu = cx == &ctx.gpu;
        const Tensor r = columns(gpu ? residual.gpu : residual.cpu, c.residual_begin, c.d);
        const Tensor xs = columns(gpu ? x.gpu : x.cpu, c.x_begin, c.d);
        add_rms_norm(*cx, r, xs, gpu ? w.gpu : w.cpu, xs, params);
      }
      ctx.gpu.synchronize();
      expect_equal(residual.gpu, residual.cpu, "residual " + what);
      expect_close(x.gpu, x.cpu, tolerance(dtype), "out " + what);
    }
  }
}

// layer_norm (the DSA indexer's keys, with a bias): dtypes, sizes, rows inside a wider buffer into
// another wider buffer (the model's layout), and in place. A row of constant values plus an offset
// checks the centring (variance ~0: the output is the bias).
TEST(CudaNorm, LayerNormMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 500;
  for (DType x_dtype : kFloatDTypes) {
    for (DType out_dtype : {x_dtype, DType::f32}) {
      for (const Size s : {Size{1, 1}, Size{3, 17}, Size{5, 128}, Size{4, 1000}}) {
        const Pair buf = random_pair(x_dtype, Shape{s.n, s.d + 9}, seed++, 2.0f);
        const Pair w = random_pair(DType::f32, Shape{s.d}, seed++, 0.5f);
        const Pair b = random_pair(x_dtype, Shape{s.d}, seed++, 0.5f);
        const Pair out = zeros_pair(out_dtype, Shape{s.n, s.d + 5});
        const std::string what = "x " + name_of(x_dtype) + " out " + name_of(out_dtype) + " [" +
                                 std::to_string(s.n) + ", " + std::to_string(s.d) + "]";
        layer_norm(ctx.cpu, columns(buf.cpu, 9, s.d), w.cpu, b.cpu, columns(out.cpu, 2, s.d),
                   1e-6f);
        layer_norm(ctx.gpu, columns(buf.gpu, 9, s.d), w.gpu, b.gpu, columns(out.gpu, 2, s.d),
                   1e-6f);
        ctx.gpu.synchronize();
        expect_close(out.gpu, out.cpu, tolerance(out_dtype), what);
        layer_norm(ctx.cpu, columns(buf.cpu, 9, s.d), w.cpu, b.cpu, columns(buf.cpu, 9, s.d),
                   1e-5f);
        layer_norm(ctx.gpu, columns(buf.gpu, 9, s.d), w.gpu, b.gpu, columns(buf.gpu, 9, s.d),
                   1e-5f);
        ctx.gpu.synchronize();
        expect_close(buf.gpu, buf.cpu, tolerance(x_dtype), "in place " + what);
      }
    }
  }
  const int64_t d = 64;
  const Pair x =
      values_pair(std::vector<float>(static_cast<size_t>(2 * d), 3.25f), DType::f32, Shape{2, d});
  const Pair w = random_pair(DType::f32, Shape{d}, 601);
  const Pair b = random_pair(DType::f32, Shape{d}, 602);
  const Pair out = zeros_pair(DType::f32, Shape{2, d});
  layer_norm(ctx.cpu, x.cpu, w.cpu, b.cpu, out.cpu, 1e-6f);
  layer_norm(ctx.gpu, x.gpu, w.gpu, b.gpu, out.gpu, 1e-6f);
  ctx.gpu.synchronize();
  expect_close(out.gpu, out.cpu, tolerance(DType::f32), "constant rows");
}

}  // namespace
}  // namespace dspark::test
