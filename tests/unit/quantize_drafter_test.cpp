// dspark quantize's drafter policy (spec/dspark/quantize_drafter.h) and quantized drafters on the
// CPU: every published-layout fixture quantized in 4 bits (groups of 32) and 8 bits (groups of
// 64) keeps its confidence head as stored, passes the reload check (its context features within
// a few percent of the float drafter's), and drafts losslessly (greedy speculative == plain
// greedy) for its float target and for the target quantized in 4 bits; a drafter whose every
// matrix qualifies (own embed_tokens / lm_head, Markov rank 32) holds all of them quantized,
// markov_w1 included. The refusals.
#include <gtest/gtest.h>

#include <cmath>

#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/registry.h"
#include "dspark/spec/dspark/drafter_weights.h"
#include "unit/quantized_drafter_testing.h"

namespace dspark {
namespace {
namespace fs = std::filesystem;

const MlxQuantSpec kSpecs[] = {{4, 32}, {8, 64}};

TEST(QuantizeDrafter, PolicyKeepsOnlyTheConfidenceHeadFloat) {
  EXPECT_TRUE(drafter_keeps_float("confidence_head.proj"));
  EXPECT_TRUE(drafter_keeps_float("model.logit_head.confidence_head.proj"));
  EXPECT_FALSE(drafter_keeps_float("embed_tokens"));
  EXPECT_FALSE(drafter_keeps_float("markov_head.markov_w1"));
  EXPECT_FALSE(drafter_keeps_float("layers.0.self_attn.q_proj"));
}

TEST(QuantizeDrafter, FixturesDraftLosslesslyForFloatAndQuantizedTargets) {
  for (const test::FixtureName& f : test::drafter_fixtures()) {
    const fs::path src = test::drafter_fixture_dir(f.fixture);
    const fs::path target_dir = test::data_dir() / "models" / f.target;
    const DrafterSmokeTest reference = drafter_smoke_test(src);
    EXPECT_EQ(reference.matrices_as_blocks, 0);
    Context ctx(Device::cpu());
    auto target = load_model(target_dir, Device::cpu(), DType::f32);
    const fs::path qtarget_dir = test::quantized_copy(target_dir, f.target, {4, 32});
    auto qtarget = load_model(qtarget_dir, Device::cpu(), DType::f32);
    ASSERT_TRUE(qtarget->lm_head().quantized());
    for (const MlxQuantSpec spec : kSpecs) {
      const std::string what = fmt::format("{} b{} g{}", f.fixture, spec.bits, spec.group_size);
      const fs::path dir = test::quantized_copy(src, f.fixture, spec);
      const std::optional<MlxQuantization> q = read_mlx_quantization(dir / "config.json");
      ASSERT_TRUE(q.has_value()) << what;
      const SafeTensors st = SafeTensors::open(dir);
      const bool confidence = load_drafter_config(src).confidence_head;
      EXPECT_EQ(st.contains("confidence_head.proj.weight") &&
                    dtype_is_float(st.get("confidence_head.proj.weight").dtype()),
                confidence)
          << what;
      EXPECT_EQ(st.get("fc.weight").dtype(), DType::i32) << what;  // U32 words

      const DrafterSmokeTest t = drafter_smoke_test(dir);
      // 4-bit (groups of 32): fc and the 4 fused matrices of each of the 2 layers as Q4_1 blocks
      // (+ own embed / lm_head); 8-bit (groups of 64): as Q8_A64 blocks those whose inputs are a
      // multiple of 64 (the others stay float).
      EXPECT_GE(t.matrices_as_blocks, spec.bits == 4 ? 9 : 5) << what;
      EXPECT_NEAR(t.features_rms, reference.features_rms, 0.05 * reference.features_rms) << what;
      EXPECT_NEAR(t.kv_rms, reference.kv_rms, (spec.bits == 4 ? 0.1 : 0.02) * reference.kv_rms)
          << what;

      test::expect_drafter_lossless(*target, ctx, dir, {4, 7}, false, what + " float target");
      test::expect_drafter_lossless(*qtarget, ctx, dir, {4}, false, what + " 4-bit target");
      fs::remove_all(dir);
    }
    fs::remove_all(qtarget_dir);
  }
}

TEST(QuantizeDrafter, EveryQualifyingMatrixQuantizedIncludingMarkovW1) {
  const fs::path target_dir = test::data_dir() / "models" / "qwen3";
  Context ctx(Device::cpu());
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  const fs::path src = test::per_test_temp_dir("dspark_qdrafter_src", "rank32");
  test::TinyDrafterSpec spec;
  spec.rank = 32;
  spec.own_embedding = true;
  spec.own_lm_head = true;
  spec.block_size = 5;
  test::write_tiny_drafter(src, spec, target->config());

  const fs::path dir = test::quantized_copy(src, "rank32", {4, 32});
  const SafeTensors st = SafeTensors::open(dir);
  for (const char* module :
       {"markov_head.markov_w1", "markov_head.markov_w2", "embed_tokens", "lm_head", "fc"}) {
    EXPECT_EQ(st.get(std::string(module) + ".weight").dtype(), DType::i32) << module;
    EXPECT_TRUE(st.contains(std::string(module) + ".scales")) << module;
  }
  for (const std::string& name : st.names()) {
    const Tensor t = st.get(name);
    if (name.ends_with(".weight") && t.dim() == 2 && dtype_is_float(t.dtype())) {
      EXPECT_NE(name.find("confidence_head"), std::string::npos) << name << " kept float";
    }
  }
  const DrafterSmokeTest t = drafter_smoke_test(dir);
  // Per layer qkv, o, gate_up, down; fc, embed, head, markov_w1, markov_w2.
  EXPECT_EQ(t.matrices_as_blocks, 2 * 4 + 5);
  test::expect_drafter_lossless(*target, ctx, dir, {5}, false, "rank32 float target");
  const fs::path qtarget_dir = test::quantized_copy(target_dir, "qwen3_rank32", {4, 32});
  auto qtarget = load_model(qtarget_dir, Device::cpu(), DType::f32);
  test::expect_drafter_lossless(*qtarget, ctx, dir, {5}, false, "rank32 4-bit target");
  fs::remove_all(dir);
  fs::remove_all(src);
  fs::remove_all(qtarget_dir);
}

TEST(QuantizeDrafter, Refusals) {
  const fs::path src = test::drafter_fixture_dir("qwen3_deepspec");
  const fs::path out = fs::temp_directory_path() / fmt::format("dspark_qdrafter_no_{}", ::getpid());
  fs::remove_all(out);
  QuantizeOptions o;
  o.input = src;
  o.output = out;
  for (const MlxQuantSpec bad : {MlxQuantSpec{4, 128}, MlxQuantSpec{3, 32}}) {
    o.spec = bad;
    try {
      quantize_drafter(o, nullptr);
      ADD_FAILURE() << "bits " << bad.bits << " group " << bad.group_size << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
      EXPECT_NE(std::string(e.what()).find("group size 32 or 64"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(out));
  const fs::path done = test::quantized_copy(src, "twice", {4, 32});
  o.input = done;
  o.spec = {4, 32};
  try {
    quantize_drafter(o, nullptr);
    ADD_FAILURE() << "an already quantized drafter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
  }
  fs::remove_all(done);
}

}  // namespace
}  // namespace dspark
