// swiglu, add and convert against naive double-precision references.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/activation.h"

namespace dspark {
namespace {

using test::random_tensor;
using test::relative_rms_error;

// f32 outputs: relative RMS error <= 1e-6 (one f32 rounding per element, plus expf);
// 16-bit outputs: the output rounding dominates (bf16: 2^-9 relative per element).
double activation_tolerance(DType out) {
  return out == DType::f32 ? 1e-6 : (out == DType::bf16 ? 4e-3 : 5e-4);
}

constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

TEST(OpsActivation, SwigluAndAddAllDtypes) {
  Context ctx(Device::cpu());
  for (int64_t d : {1, 3, 17, 127, 4099}) {
    for (int64_t n : {1, 5, 33}) {
      for (DType in_dtype : kFloatTypes) {
        for (DType out_dtype : kFloatTypes) {
          SCOPED_TRACE(fmt::format("n={} d={} in={} out={}", n, d, dtype_name(in_dtype),
                                   dtype_name(out_dtype)));
          // gate and up are the two halves of one fused [n, 2d] projection (strided rows).
          OwnedTensor fused = random_tensor(in_dtype, Shape{n, 2 * d}, 31 + d + n, 3.0f);
          const Tensor gate = fused.view().slice(1, 0, d), up = fused.view().slice(1, d, 2 * d);
          OwnedTensor out(out_dtype, Shape{n, d}, Device::cpu());
          swiglu(ctx, gate, up, out);
          const std::vector<float> g = to_f32_vector(gate), u = to_f32_vector(up);
          std::vector<float> ref(g.size());
          for (size_t i = 0; i < g.size(); ++i)
            ref[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i]);
          EXPECT_LE(relative_rms_error(to_f32_vector(out), ref), activation_tolerance(out_dtype));

          OwnedTensor sum(out_dtype, Shape{n, d}, Device::cpu());
          add(ctx, gate, up, sum);
          for (size_t i = 0; i < g.size(); ++i)
            ref[i] = static_cast<float>(static_cast<double>(g[i]) + u[i]);
          EXPECT_LE(relative_rms_error(to_f32_vector(sum), ref), activation_tolerance(out_dtype));
        }
      }
    }
  }
}

TEST(OpsActivation, OutputMayAliasAnInput) {
  Context ctx(Device::cpu());
  for (DType dtype : {DType::f32, DType::bf16}) {
    OwnedTensor a = random_tensor(dtype, Shape{9, 2500}, 1);
    OwnedTensor b = random_tensor(dtype, Shape{9, 2500}, 2);
    const std::vector<float> av = to_f32_vector(a), bv = to_f32_vector(b);
    add(ctx, a, b, a);
    std::vector<float> ref(av.size());
    for (size_t i = 0; i < av.size(); ++i) ref[i] = av[i] + bv[i];
    EXPECT_LE(relative_rms_error(to_f32_vector(a), ref), activation_tolerance(dtype));
    swiglu(ctx, b, a, b);
    const std::vector<float> sum = to_f32_vector(a);
    for (size_t i = 0; i < av.size(); ++i)
      ref[i] = static_cast<float>(bv[i] / (1.0 + std::exp(-static_cast<double>(bv[i]))) * sum[i]);
    EXPECT_LE(relative_rms_error(to_f32_vector(b), ref), activation_tolerance(dtype));
  }
}

TEST(OpsActivation, SwigluExtremes) {
  Context ctx(Device::cpu());
  const std::vector<float> g = {-1000.0f, -88.0f, 0.0f, 88.0f, 1000.0f};
  OwnedTensor gate = OwnedTensor::from_vector(g, Shape{1, 5}, Device::cpu());
  OwnedTensor up =
      OwnedTensor::from_vector(std::vector<float>(5, 2.0f), Shape{1, 5}, Device::cpu());
  OwnedTensor out(DType::f32, Shape{1, 5}, Device::cpu());
  swiglu(ctx, gate, up, out);
  const std::vector<float> o = to_f32_vector(out);
  for (float v : o) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(o[0], 0.0f);
  EXPECT_EQ(o[2], 0.0f);
  EXPECT_FLOAT_EQ(o[3], 176.0f);
  EXPECT_FLOAT_EQ(o[4], 2000.0f);
}

TEST(OpsActivation, ConvertIsOneRounding) {
  Context ctx(Device::cpu());
  for (DType src_dtype : kFloatTypes) {
    for (DType out_dtype : kFloatTypes) {
      // rank 3, leading dims collapsing into rows
      OwnedTensor src = random_tensor(src_dtype, Shape{3, 5, 129}, 9, 10.0f);
      OwnedTensor out(out_dtype, Shape{3, 5, 129}, Device::cpu());
      convert(ctx, src, out);
      const std::vector<float> sv = to_f32_vector(src), ov = to_f32_vector(out);
      for (size_t i = 0; i < sv.size(); ++i) {
        const float expect = dispatch_float(
            out_dtype, [&]<typename T>(TypeTag<T>) { return to_f32(from_f32<T>(sv[i])); });
        ASSERT_EQ(ov[i], expect) << dtype_name(src_dtype) << "->" << dtype_name(out_dtype);
      }
    }
  }
}

TEST(OpsActivation, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor a = random_tensor(DType::f32, Shape{4, 8}, 1);
  OwnedTensor b = random_tensor(DType::f32, Shape{4, 7}, 1);
  OwnedTensor out(DType::f32, Shape{4, 8}, Device::cpu());
  OwnedTensor ints(DType::i32, Shape{4, 8}, Device::cpu());
  EXPECT_THROW(add(ctx, a, b, out), Error);
  EXPECT_THROW(swiglu(ctx, a, a, b), Error);
  EXPECT_THROW(swiglu(ctx, a, ints, out), Error);
  EXPECT_THROW(convert(ctx, a, ints), Error);
  // leading dims that do not collapse into rows
  OwnedTensor big = random_tensor(DType::f32, Shape{4, 4, 8}, 1);
  const Tensor holes = big.view().slice(1, 0, 2);  // [4, 2, 8] with a gap after every 2 rows
  OwnedTensor dst(DType::f32, Shape{4, 2, 8}, Device::cpu());
  EXPECT_THROW(convert(ctx, holes, dst), Error);
}

}  // namespace
}  // namespace dspark
