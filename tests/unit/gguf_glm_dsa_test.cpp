// GLM-5 (GlmMoeDsaForCausalLM) from GGUF files of llama.cpp's `glm-dsa` layout: deepseek2's MLA
// and DeepSeek MoE plus the DSA indexer (model/gguf_model.h, docs/gguf.md).
// (a) glm-dsa metadata as llama.cpp's converter writes it, read back through a file: the
//     indexer's keys; attention.indexer.types as a bool array, an integer array or one value,
//     else the layers holding blk.N.indexer.* tensors; sigmoid routing without
//     expert_gating_func; the refusals (a first layer without an indexer, a wrong count, a full
//     layer without its tensors, no q LoRA, softmax routing).
// (b) the golden fixture tests/data/models/glm_moe_dsa written as a glm-dsa file at test time by
//     tools/gguf/make_fixtures.py --deepseek-moe (the `gguf` package's names; skipped without
//     python3 and that package): the config of its config.json, logits bit-equal to the
//     safetensors load's on the CPU in f32 (the same weights), transformers' goldens (logits,
//     taps, greedy), its Q8_0 twin's greedy tokens against its dequantized weights', and the
//     refusal of --draft mtp for a target without an MTP layer (the GLM-5 MTP layer:
//     spec_mtp_test.cpp, spec_mtp_gguf_test.cpp).
#include <gtest/gtest.h>

#include <cstddef>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "common/gguf_fixtures.h"
#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/io/gguf.h"
#include "dspark/io/gguf_writer.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/mla.h"
#include "dspark/model/mtp.h"
#include "dspark/model/registry.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

using test::kCpu;

// glm-dsa metadata of two decoder layers (test::deepseek_metadata without expert_gating_func, as
// the converter writes it for a config without scoring_func) plus the indexer's keys and, unless
// nullopt, attention.indexer.types.
test::GgufMetadata glm_dsa_metadata(std::optional<GgufValue> types) {
  test::GgufMetadata meta = test::deepseek_metadata("glm-dsa", std::nullopt, 1);
  meta.emplace_back("glm-dsa.attention.indexer.head_count", gguf_u32(8));
  meta.emplace_back("glm-dsa.attention.indexer.key_length", gguf_u32(16));
  meta.emplace_back("glm-dsa.attention.indexer.top_k", gguf_u32(6));
  if (types) meta.emplace_back("glm-dsa.attention.indexer.types", *types);
  return meta;
}

GgufValue bools(std::vector<int64_t> v) {
  return {GgufValue::Type::array, GgufValue::Type::boolean, std::move(v)};
}

// The tensors a file needs for `layers` to have an indexer (and layer 1 its router).
std::vector<std::string> indexer_tensors(const std::vector<int>& layers) {
  std::vector<std::string> names = {"blk.1.ffn_gate_inp.weight"};
  for (int l : layers) names.push_back(fmt::format("blk.{}.indexer.attn_k.weight", l));
  return names;
}

TEST(GgufGlmDsa, ConfigFromMetadata) {
  const ModelConfig c =
      test::config_from_metadata(glm_dsa_metadata(bools({1, 0})), indexer_tensors({0}));
  EXPECT_EQ(c.architecture, "GlmMoeDsaForCausalLM");
  EXPECT_EQ(c.model_type, "glm_moe_dsa");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_head_dim, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_TRUE(c.moe_sigmoid_routing);  // no expert_gating_func: llama.cpp's glm-dsa default
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true}));
  EXPECT_TRUE(c.dsa());
  EXPECT_EQ(c.index_topk, 6);
  EXPECT_EQ(c.index_n_heads, 8);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_shared, (std::vector<bool>{false, true}));

  // The flags as integers, as one value for every layer, or from the tensors present.
  const GgufValue u32s{GgufValue::Type::array, GgufValue::Type::u32, std::vector<int64_t>{1, 1}};
  for (const auto& [types, with, shared] :
       {std::tuple{std::optional<GgufValue>(u32s), std::vector<int>{0, 1},
                   std::vector<bool>{false, false}},
        std::tuple{std::optional<GgufValue>(gguf_bool(true)), std::vector<int>{0, 1},
                   std::vector<bool>{false, false}},
        std::tuple{std::optional<GgufValue>(), std::vector<int>{0}, std::vector<bool>{false, true}},
        std::tuple{std::optional<GgufValue>(), std::vector<int>{0, 1},
                   std::vector<bool>{false, false}}}) {
    EXPECT_EQ(
        test::config_from_metadata(glm_dsa_metadata(types), indexer_tensors(with)).index_shared,
        shared);
  }
}

TEST(GgufGlmDsa, RefusesWhatItCannotRun) {
  test::GgufMetadata no_q_lora = glm_dsa_metadata(bools({1, 0}));
  std::erase_if(no_q_lora, [](const auto& kv) { return kv.first.ends_with("q_lora_rank"); });
  test::GgufMetadata softmax = glm_dsa_metadata(bools({1, 0}));
  softmax.emplace_back("glm-dsa.expert_gating_func", gguf_u32(1));
  for (const auto& [meta, tensors, kind, needle] : {
           std::tuple{glm_dsa_metadata(bools({0, 1})), indexer_tensors({0, 1}), ErrorKind::io,
                      "types[0] is false"},
           std::tuple{glm_dsa_metadata(bools({1})), indexer_tensors({0}), ErrorKind::io,
                      "has 1 entries for 2 decoder layers"},
           std::tuple{glm_dsa_metadata(bools({1, 1})), indexer_tensors({0}), ErrorKind::io,
                      "no blk.1.indexer.attn_k.weight"},
           std::tuple{glm_dsa_metadata(std::nullopt), indexer_tensors({}), ErrorKind::io,
                      "no blk.0.indexer.attn_k.weight"},
           std::tuple{no_q_lora, indexer_tensors({0}), ErrorKind::unsupported, "q_lora_rank"},
           std::tuple{softmax, indexer_tensors({0}), ErrorKind::unsupported,
                      "expert_gating_func 1"},
       }) {
    try {
      (void)test::config_from_metadata(meta, tensors);
      ADD_FAILURE() << "expected an error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// The golden fixture as a glm-dsa file (F32, or Q8_0), written once per test process.
class GlmDsaFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::golden_models_dir() / "glm_moe_dsa";
    if (!std::filesystem::exists(dir_ / "goldens.safetensors"))
      GTEST_SKIP() << "fixture " << dir_ << " missing";
    if (!test::python_has_gguf()) GTEST_SKIP() << "python3 with the gguf package missing";
  }
  // The file (`q8_0`: its matrices in Q8_0); a failure to write it is a fatal failure.
  std::filesystem::path file(bool q8_0) {
    static const test::TempDir tmp;
    const std::filesystem::path out = tmp / (q8_0 ? "glm_dsa_q8_0.gguf" : "glm_dsa.gguf");
    if (!std::filesystem::exists(out)) test::write_deepseek_moe_gguf(dir_, out, "glm-dsa", q8_0);
    return out;
  }
  std::filesystem::path dir_;
};

TEST_F(GlmDsaFixture, ConfigEqualsConfigJson) {
  const std::filesystem::path path = file(false);
  ASSERT_FALSE(HasFatalFailure());
  const GgufFile g = GgufFile::open(path);
  const ModelConfig c = gguf_model_config(g);
  const ModelConfig hf = load_model_config(dir_);
  test::expect_same_hyper_parameters(c, hf);
  EXPECT_EQ(c.architecture, hf.architecture);
  EXPECT_EQ(c.model_type, hf.model_type);
  EXPECT_EQ(c.num_layers, hf.num_layers);
  EXPECT_EQ(mla_dims(c).row(), mla_dims(hf).row());  // every MLA and indexer width
  EXPECT_EQ(mla_dims(c).in_width(), mla_dims(hf).in_width());
  EXPECT_EQ(c.qk_nope_head_dim, hf.qk_nope_head_dim);
  EXPECT_EQ(c.v_head_dim, hf.v_head_dim);
  EXPECT_EQ(c.rope_interleave, hf.rope_interleave);
  EXPECT_EQ(c.rope_scaling.type, hf.rope_scaling.type);
  EXPECT_EQ(c.moe_sigmoid_routing, hf.moe_sigmoid_routing);
  EXPECT_EQ(std::tuple(c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size,
                       c.n_shared_experts, c.n_group, c.topk_group, c.norm_topk_prob),
            std::tuple(hf.num_experts, hf.num_experts_per_tok, hf.moe_intermediate_size,
                       hf.n_shared_experts, hf.n_group, hf.topk_group, hf.norm_topk_prob));
  EXPECT_NEAR(c.routed_scaling_factor, hf.routed_scaling_factor, 1e-6);
  EXPECT_EQ(c.layer_moe, hf.layer_moe);
  EXPECT_EQ(std::tuple(c.index_topk, c.index_n_heads, c.index_head_dim),
            std::tuple(hf.index_topk, hf.index_n_heads, hf.index_head_dim));
  EXPECT_EQ(c.index_shared, hf.index_shared);
  // The shared layers (1 and 3) hold no indexer tensors; the full ones all five.
  const GgufWeights w(g, c);
  for (int l = 0; l < c.num_layers; ++l) {
    for (const char* t :
         {"wq_b.weight", "wk.weight", "weights_proj.weight", "k_norm.weight", "k_norm.bias"}) {
      EXPECT_EQ(w.contains(fmt::format("model.layers.{}.self_attn.indexer.{}", l, t)),
                !c.index_shared[static_cast<size_t>(l)])
          << l << " " << t;
    }
  }
}

TEST_F(GlmDsaFixture, LogitsEqualSafetensorsAndGoldens) {
  const std::filesystem::path path = file(false);
  ASSERT_FALSE(HasFatalFailure());
  Context ctx(kCpu);
  auto gg = load_model(path, kCpu, DType::f32);
  auto st = load_model(dir_, kCpu, DType::f32);
  const test::GoldenSet golden = test::load_golden_set(dir_);
  test::WorstErrors worst;
  for (int p = 0; p < static_cast<int>(golden.prompts.size()); ++p) {
    // The prompt and its greedy path: up to 106 tokens against the indexer's top 6.
    std::vector<int32_t> seq = golden.prompts[static_cast<size_t>(p)].tokens;
    const std::vector<int32_t>& greedy = golden.prompts[static_cast<size_t>(p)].greedy;
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    for (size_t n : {seq.size() / 2, seq.size()}) {
      const std::vector<int32_t> prefix(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(n));
      EXPECT_EQ(test::last_position_logits(*gg, ctx, prefix),
                test::last_position_logits(*st, ctx, prefix))
          << "p" << p << " after " << n << " tokens";
    }
    test::check_single_prompt_forward(*gg, ctx, golden, p, 1e-4, worst);
    test::check_greedy_generate(*gg, ctx, golden, p);
  }
  std::cout << "[glm-dsa gguf cpu f32] worst rel RMS: " << worst.str() << "\n";
}

// --draft mtp refuses this GLM-5 target (its config declares no MTP layer), from GGUF as from
// safetensors, naming the reason.
TEST_F(GlmDsaFixture, MtpLayerIsRefusedWithoutOne) {
  const std::filesystem::path path = file(false);
  ASSERT_FALSE(HasFatalFailure());
  for (const auto& [target, why] :
       {std::pair{path, "its GGUF file has no nextn_predict_layers"},
        std::pair{dir_, "its config has no num_nextn_predict_layers"}}) {
    try {
      (void)MtpLayer::load(load_model(target, kCpu, DType::f32)->config(), kCpu, DType::f32);
      ADD_FAILURE() << "expected an error for " << target;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

// The Q8_0 file with its blocks kept decodes like the same weights dequantized (the near-tie rule
// of expect_twins_greedy_tokens). The indexer's top-k is widened past the sequences (dense
// attention): the fixture's 6th and 7th indexer scores are as close as 1e-4, and with the top 6 the
// 8-bit rounding of the activations flips choices that move a logits row by up to 64% relative RMS
// (the expert routing's near-ties still move some rows by up to 28%).
TEST_F(GlmDsaFixture, Q8_0FileDecodesLikeItsDequantizedWeights) {
  const std::filesystem::path path = file(true);
  ASSERT_FALSE(HasFatalFailure());
  const GgufFile g = GgufFile::open(path);
  ModelConfig c = gguf_model_config(g);
  const GgufWeights w(g, c);
  // The experts stay Q8_0 blocks; the indexer's key projection is stored as Q8_0 too (read
  // dequantized, like MLA's projections).
  EXPECT_TRUE(w.get_quantized("model.layers.1.mlp.experts.3.up_proj.weight").has_value());
  EXPECT_EQ(g.tensor("blk.0.indexer.attn_k.weight").type, GgmlType::q8_0);
  c.index_topk = 128;
  Context ctx(kCpu);
  auto model = create_model(c, w, kCpu, DType::f32);
  const test::DequantizedView dense(w);
  auto twin = create_model(c, dense, kCpu, DType::f32);
  for (const test::GoldenPrompt& gp : test::load_golden_set(dir_).prompts)
    test::expect_twins_greedy_tokens(*model, *twin, ctx, gp.tokens, true);
}

}  // namespace
}  // namespace dspark
