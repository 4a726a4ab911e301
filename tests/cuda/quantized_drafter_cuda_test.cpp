// Quantized DFlash / DSpark drafters on the GPU (tests/unit/quantize_drafter_test.cpp on the
// CPU): every published-layout fixture quantized by dspark quantize's drafter policy (4 bits in
// groups of 32: Q4_1 blocks; 8 bits in groups of 64: dequantized at load) drafts losslessly
// - for its float target in f32, all prompts batched, gamma 4 and 7;
// - for its target quantized in 4 bits, in bf16, one prompt at a time with gamma 3 (verifies of
//   at most 4 rows run the few-row block kernel that decoding runs: the same bits for every row
//   count; see tests/cuda/quant_model_cuda_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "cuda_consistency.h"
#include "dspark/model/registry.h"
#include "unit/quantized_drafter_testing.h"

namespace dspark {
namespace {
namespace fs = std::filesystem;

TEST(CudaQuantizedDrafter, FixturesDraftLosslesslyForFloatAndQuantizedTargets) {
  DSPARK_REQUIRE_CUDA();
  Context ctx(test::kTestGpu);
  for (const test::FixtureName& f : test::drafter_fixtures()) {
    const fs::path src = test::drafter_fixture_dir(f.fixture);
    const fs::path target_dir = test::data_dir() / "models" / f.target;
    auto target = load_model(target_dir, test::kTestGpu, DType::f32);
    const fs::path qtarget_dir = test::quantized_copy(target_dir, f.target + "_cuda", {4, 32});
    auto qtarget = load_model(qtarget_dir, test::kTestGpu, DType::bf16);
    ASSERT_TRUE(qtarget->lm_head().quantized());
    for (const MlxQuantSpec spec : {MlxQuantSpec{4, 32}, MlxQuantSpec{8, 64}}) {
      const std::string what = fmt::format("{} b{} g{}", f.fixture, spec.bits, spec.group_size);
      const fs::path dir = test::quantized_copy(src, f.fixture + "_cuda", spec);
      test::expect_drafter_lossless(*target, ctx, dir, {4, 7}, false, what + " float target");
      test::expect_drafter_lossless(*qtarget, ctx, dir, {3}, true, what + " 4-bit bf16 target");
      fs::remove_all(dir);
    }
    fs::remove_all(qtarget_dir);
  }
}

}  // namespace
}  // namespace dspark
