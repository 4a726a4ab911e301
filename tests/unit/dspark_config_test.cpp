// Drafter config layouts (DeepSpec / SpecForge / z-lab DFlash), detection, and the one-line
// invalid_input errors for drafters that do not fit the target.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "dspark/spec/dspark/dspark_source.h"
#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

using nlohmann::json;

std::filesystem::path config_temp_dir(const std::string& name) {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::filesystem::temp_directory_path() / ("dspark_cfg_" + test + "_" + name);
}

// The published Qwen3-8B drafter configs (shapes from the public model cards / repositories).
json qwen3_8b_base() {
  return {{"model_type", "qwen3"},
          {"vocab_size", 151936},
          {"hidden_size", 4096},
          {"intermediate_size", 12288},
          {"num_hidden_layers", 5},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000},
          {"max_position_embeddings", 40960},
          {"num_target_layers", 36},
          {"tie_word_embeddings", false}};
}

TEST(DSparkConfig, DeepSpecLayout) {
  json j = qwen3_8b_base();
  j["architectures"] = {"Qwen3DSparkModel"};
  j["block_size"] = 7;
  j["mask_token_id"] = 151669;
  j["target_layer_ids"] = {1, 9, 17, 25, 33};
  j["num_anchors"] = 512;
  j["markov_rank"] = 256;
  j["markov_head_type"] = "vanilla";
  j["enable_confidence_head"] = true;
  j["confidence_head_with_markov"] = true;
  const DrafterConfig c = parse_drafter_config(j, "config.json");
  EXPECT_EQ(c.layout, DrafterLayout::deepspec);
  EXPECT_EQ(c.block_size, 7);
  EXPECT_EQ(c.mask_token_id, 151669);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int>{1, 9, 17, 25, 33}));
  EXPECT_EQ(c.markov_rank, 256);
  EXPECT_EQ(c.markov_head, MarkovHeadType::vanilla);
  EXPECT_TRUE(c.confidence_head);
  EXPECT_TRUE(c.confidence_with_markov);
  EXPECT_EQ(c.draft_row_offset(), 0);
  EXPECT_EQ(c.drafts_per_block(7), 7);
  EXPECT_EQ(c.backbone.hidden_size, 4096);
  EXPECT_EQ(c.backbone.head_dim, 128);
  EXPECT_EQ(c.num_target_layers, 36);
  // DeepSpec requires markov_head_type when markov_rank > 0.
  j.erase("markov_head_type");
  EXPECT_THROW(parse_drafter_config(j, "config.json"), Error);
}

TEST(DSparkConfig, SpecForgeLayout) {
  json j = qwen3_8b_base();
  j["architectures"] = {"DSparkDraftModel"};
  j["block_size"] = 7;
  j["dflash_config"] = {{"attention_mode", "gqa"},
                        {"confidence_head_alpha", 1.0},
                        {"confidence_head_with_markov", true},
                        {"enable_confidence_head", true},
                        {"markov_head_type", "rnn"},
                        {"markov_rank", 256},
                        {"mask_token_id", 151669},
                        {"projector_type", "dspark"},
                        {"target_layer_ids", {1, 9, 17, 25, 33}}};
  const DrafterConfig c = parse_drafter_config(j, "config.json");
  EXPECT_EQ(c.layout, DrafterLayout::specforge);
  EXPECT_EQ(c.markov_head, MarkovHeadType::rnn);
  EXPECT_TRUE(c.confidence_head);
  EXPECT_EQ(c.draft_row_offset(), 0);
  j["dflash_config"]["projector_type"] = "eagle";
  EXPECT_THROW(parse_drafter_config(j, "config.json"), Error);
}

TEST(DSparkConfig, DFlashLayoutAndDefaultTaps) {
  json j = qwen3_8b_base();
  j["architectures"] = {"DFlashDraftModel"};
  j["block_size"] = 16;
  j["dflash_config"] = {{"mask_token_id", 151669}, {"target_layer_ids", {1, 9, 17, 25, 33}}};
  DrafterConfig c = parse_drafter_config(j, "config.json");
  EXPECT_EQ(c.layout, DrafterLayout::dflash);
  EXPECT_EQ(c.markov_head, MarkovHeadType::none);
  EXPECT_FALSE(c.confidence_head);
  EXPECT_EQ(c.draft_row_offset(), 1);
  EXPECT_EQ(c.drafts_per_block(16), 15);
  // Without target_layer_ids: z-lab's default spread, which for 36 target layers and 5 draft
  // layers is the published [1, 9, 17, 25, 33].
  j["dflash_config"].erase("target_layer_ids");
  c = parse_drafter_config(j, "config.json");
  EXPECT_EQ(c.target_layer_ids, (std::vector<int>{1, 9, 17, 25, 33}));
  EXPECT_EQ(default_target_layer_ids(36, 1), (std::vector<int>{18}));
}

TEST(DSparkConfig, OtherArchitecturesAreNotDrafters) {
  json j = qwen3_8b_base();
  j["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_THROW(parse_drafter_config(j, "config.json"), Error);
  EXPECT_FALSE(is_block_drafter_dir(test::data_dir() / "models" / "qwen3"));
  EXPECT_FALSE(is_block_drafter_dir(config_temp_dir("missing")));
}

class DSparkFit : public ::testing::Test {
 protected:
  void SetUp() override {
    target_dir_ = test::data_dir() / "models" / "qwen3";
    if (!std::filesystem::exists(target_dir_ / "config.json")) GTEST_SKIP() << "no qwen3";
    target_ = load_model(target_dir_, Device::cpu(), DType::f32);
  }
  // Writes a drafter built for `fake` (a modified copy of the target's config) and expects
  // load_dspark_source to fail with invalid_input mentioning `needle`.
  void expect_mismatch(const ModelConfig& fake, const test::TinyDrafterSpec& spec,
                       const std::string& needle) {
    const auto dir = config_temp_dir(needle);
    test::write_tiny_drafter(dir, spec, fake);
    EXPECT_TRUE(is_block_drafter_dir(dir));
    try {
      load_dspark_source(dir, *target_);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
  std::filesystem::path target_dir_;
  std::unique_ptr<Model> target_;
};

TEST_F(DSparkFit, MatchingDrafterLoads) {
  const auto dir = config_temp_dir("ok");
  test::write_tiny_drafter(dir, test::TinyDrafterSpec{}, target_->config());
  auto source = load_dspark_source(dir, *target_);
  EXPECT_EQ(source->name(), "dspark");
  EXPECT_EQ(source->target_taps(), (std::vector<int>{0, 2}));
  EXPECT_TRUE(source->thresholds().empty());
}

TEST_F(DSparkFit, VocabularyMismatch) {
  ModelConfig fake = target_->config();
  fake.vocab_size += 16;
  expect_mismatch(fake, {}, "vocabulary");
}

TEST_F(DSparkFit, HiddenSizeMismatch) {
  ModelConfig fake = target_->config();
  fake.hidden_size = 32;
  expect_mismatch(fake, {}, "hidden size");
}

TEST_F(DSparkFit, TapWidthMismatchWithOwnEmbeddings) {
  // The drafter brings its own embedding and LM head (hidden 32), but its fc expects taps of
  // width 32 while the target's are 64.
  ModelConfig fake = target_->config();
  fake.hidden_size = 32;
  test::TinyDrafterSpec spec;
  spec.own_embedding = true;
  spec.own_lm_head = true;
  expect_mismatch(fake, spec, "fc.weight");
}

TEST_F(DSparkFit, TargetLayerCountMismatch) {
  ModelConfig fake = target_->config();
  fake.num_layers = 6;
  expect_mismatch(fake, {}, "layers");
}

TEST_F(DSparkFit, TapOutOfRange) {
  test::TinyDrafterSpec spec;
  spec.taps = {0, 4};
  expect_mismatch(target_->config(), spec, "outside");
}

TEST_F(DSparkFit, TapOnTheLastLayer) {
  test::TinyDrafterSpec spec;
  spec.taps = {0, 3};  // the tiny target has 4 layers
  expect_mismatch(target_->config(), spec, "last layer");
}

TEST_F(DSparkFit, TapsNotIncreasing) {
  test::TinyDrafterSpec spec;
  spec.taps = {2, 1};
  expect_mismatch(target_->config(), spec, "increasing");
}

TEST_F(DSparkFit, MaskTokenOutOfRange) {
  test::TinyDrafterSpec spec;
  spec.mask_token_id = 10000;
  // The drafter's own vocabulary matches; only the mask id is bad.
  expect_mismatch(target_->config(), spec, "mask_token_id");
}

TEST_F(DSparkFit, ThresholdsFileIsRead) {
  const auto dir = config_temp_dir("thr");
  test::write_tiny_drafter(dir, test::TinyDrafterSpec{}, target_->config());
  ThresholdsFile f;
  f.thresholds = {0.0f, 0.5f, 0.25f};
  write_thresholds_file(dir / kThresholdsFileName, f);
  EXPECT_EQ(load_dspark_source(dir, *target_)->thresholds(), f.thresholds);
  EXPECT_TRUE(load_dspark_source(dir, *target_, {}, false)->thresholds().empty());
  DSparkSourceOptions explicit_thresholds;
  explicit_thresholds.thresholds = {0.0f, 0.9f};
  EXPECT_EQ(load_dspark_source(dir, *target_, explicit_thresholds)->thresholds(),
            explicit_thresholds.thresholds);
}

TEST_F(DSparkFit, FullDrafterCache) {
  // kv_tokens 16 -> 2 pages of 16 tokens. A 28-token prompt fits (commit), a block of 7 rows after
  // it does not: rounds propose nothing (counted) and decoding stays exact.
  const auto dir = config_temp_dir("kv");
  test::TinyDrafterSpec spec;
  spec.block_size = 7;
  test::write_tiny_drafter(dir, spec, target_->config());
  DSparkSourceOptions opt;
  opt.kv_tokens = 16;
  auto source = load_dspark_source(dir, *target_, opt);
  Context ctx(Device::cpu());
  std::vector<int32_t> prompt(28);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 7 % 300);
  GenerateOptions o;
  o.max_tokens = 3;
  o.eos_token_ids = {};
  const auto plain = generate(*target_, ctx, prompt, o).tokens;
  std::vector<RequestInput> reqs = {RequestInput{prompt, o, nullptr, {}}};
  SpecConfig cfg;
  cfg.gamma = 7;
  const auto out = generate_speculative(*target_, ctx, source.get(), std::move(reqs), cfg);
  EXPECT_EQ(out[0].result.tokens, plain);
  EXPECT_GT(source->dspark_stats().n_kv_full, 0);
  EXPECT_EQ(source->stats().n_drafted, 0);

  // A commit beyond the capacity is an out_of_memory error naming the fix.
  std::vector<int32_t> long_prompt(40, 5);
  auto small = load_dspark_source(dir, *target_, opt);
  PagedKvCache kv(target_->kv_shape(16, 8), Device::cpu());
  ForwardBatch b;
  b.tokens = long_prompt;
  b.row_indptr = {0, 40};
  b.seqs = {kv.create_sequence()};
  b.tap_layers = small->target_taps();
  const ForwardOutput fo = target_->forward(ctx, kv, b);
  small->begin(ctx, 0, long_prompt);
  RowUpdate u;
  u.kept_tokens = long_prompt;
  u.pending = 5;
  try {
    small->commit(ctx, std::span<const RowUpdate>(&u, 1), fo.taps);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory) << e.what();
    EXPECT_NE(std::string(e.what()).find("kv_tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dspark
