// MLX affine-quantized checkpoints (model/mlx_weights.h) loaded through load_model:
// tests/data/mlx/llama3_q4_g32, llama3_q4_g64, llama3_q8_g64 and llama3_q3_g64, the tiny golden
// Llama 3 quantized as mlx-lm does (tools/mlx/make_mlx_fixtures.py; the 4-bit g32 one with a
// module left in f32 and one in 8 bits through per-module config entries; the 3-bit one with
// modules in 2, 5 and 6 bits). The weights stay blocks, one per group (Q4_1, Q4_A64, Q8_A64;
// down_proj's groups of 32 Q4_1 / Q8_A; 2 and 3 bits in Q4 blocks, 5 and 6 in Q8 ones); each model
// decodes the greedy tokens of its twin with the same weights dequantized to f32 up to near-ties
// (logits within the quantized product's tolerance: x is rounded to 8 bits;
// test::expect_twins_greedy_tokens), and the g64 models hold within 5% of their file's tensor
// bytes. Greedy speculative decoding equals plain greedy decoding.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <functional>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/core/error.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/mlx_quant.h"
#include "dspark/io/safetensors.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/config.h"
#include "dspark/model/mlx_weights.h"
#include "dspark/model/model.h"
#include "dspark/model/registry.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

std::filesystem::path fixture(const char* name) {
  return test::data_dir() / "mlx" / name;
}

struct Twins {
  std::unique_ptr<Model> quantized, dequantized;
};

Twins load_twins(const std::filesystem::path& dir) {
  Twins t;
  t.quantized = load_model(dir, Device::cpu(), DType::f32);
  const ModelConfig config = load_model_config(dir);
  const SafeTensors st = SafeTensors::open(dir);
  const MlxWeights weights(st, *read_mlx_quantization(dir / "config.json"));
  t.dequantized = create_model(config, test::DequantizedView(weights), Device::cpu(), DType::f32);
  return t;
}

struct Fixture {
  const char* name;
  QuantType blocks;  // the blocks its embedding table and LM head are kept in
  double tolerance;  // relative RMS of the last logits against the dequantized twin
};

class MlxModel : public ::testing::TestWithParam<Fixture> {};

TEST_P(MlxModel, MatchesItsDequantizedTwin) {
  const Fixture f = GetParam();
  Twins t = load_twins(fixture(f.name));
  ASSERT_TRUE(t.quantized->lm_head().quantized());
  ASSERT_TRUE(t.quantized->embedding_table().quantized());
  EXPECT_EQ(t.quantized->lm_head().quant, f.blocks);
  EXPECT_EQ(t.quantized->embedding_table().quant, f.blocks);
  EXPECT_FALSE(t.dequantized->lm_head().quantized());
  Context ctx(Device::cpu());
  const int vocab = t.quantized->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const std::vector<float> q = test::last_position_logits(*t.quantized, ctx, prompt);
    const std::vector<float> d = test::last_position_logits(*t.dequantized, ctx, prompt);
    const double err = test::relative_rms_error(q, d);
    EXPECT_LE(err, f.tolerance) << f.name << " prompt " << salt;
    std::cout << f.name << " prompt " << salt << ": relative RMS " << err << "\n";
    SCOPED_TRACE(fmt::format("{} prompt {}", f.name, salt));
    test::expect_twins_greedy_tokens(*t.quantized, *t.dequantized, ctx, prompt, true);
  }
}

TEST_P(MlxModel, GreedySpeculativeEqualsPlainGreedy) {
  const Fixture f = GetParam();
  std::unique_ptr<Model> target = load_model(fixture(f.name), Device::cpu(), DType::f32);
  Context ctx(Device::cpu());
  const int vocab = target->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts, plain;
  for (int salt = 0; salt < 4; ++salt) {
    prompts.push_back(test::fixed_prompt(vocab, salt));
    plain.push_back(generate(*target, ctx, prompts.back(), test::greedy_tokens(20)).tokens);
  }
  for (int gamma : {1, 4}) {
    NgramSource source(NgramConfig{1, 3});
    std::vector<RequestInput> reqs;
    for (const auto& p : prompts)
      reqs.push_back(RequestInput{p, test::greedy_tokens(20), nullptr, {}});
    SpecConfig cfg;
    cfg.gamma = gamma;
    const auto out = generate_speculative(*target, ctx, &source, std::move(reqs), cfg);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(out[i].result.tokens, plain[i]) << f.name << " gamma " << gamma << " prompt " << i;
    }
  }
}

// A scratch copy of the 4-bit fixture with its config.json edited by `edit`.
std::filesystem::path edited_q4(const char* tag, const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("dspark_mlx_model_{}_{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::copy(fixture("llama3_q4_g32"), dir, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  edit(config);
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

TEST(MlxModelTied, TiedEmbeddingsKeepTheirBlocksAsTheLmHead) {
  // The checkpoint's lm_head tensors are ignored; the Q4_1 embedding table is the LM head.
  const std::filesystem::path dir =
      edited_q4("tied", [](nlohmann::json& c) { c["tie_word_embeddings"] = true; });
  Twins t = load_twins(dir);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(t.quantized->lm_head().quantized());
  EXPECT_EQ(t.quantized->lm_head().data.data(), t.quantized->embedding_table().data.data());
  Context ctx(Device::cpu());
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(t.quantized->config().vocab_size, salt);
    EXPECT_LE(test::relative_rms_error(test::last_position_logits(*t.quantized, ctx, prompt),
                                       test::last_position_logits(*t.dequantized, ctx, prompt)),
              3e-2)
        << "prompt " << salt;
    EXPECT_EQ(generate(*t.quantized, ctx, prompt, test::greedy_tokens(24)).tokens,
              generate(*t.dequantized, ctx, prompt, test::greedy_tokens(24)).tokens)
        << "prompt " << salt;
  }
}

class MlxModelMemory : public ::testing::TestWithParam<const char*> {};

TEST_P(MlxModelMemory, WeightsTakeTheFilesTensorBytesWithin5Percent) {
  // One block per group: an f16 scale and bias per 64 values where the file has bf16 ones, so
  // 4.5 / 8.5 bits per value as in the file (9 / 5 with down_proj's groups of 32 in both).
  // Dequantized to f32 they would take ~3.6x (8 bits) / ~7x (4 bits).
  const char* name = GetParam();
  const std::filesystem::path dir = fixture(name);
  const SafeTensors st = SafeTensors::open(dir);
  int64_t file_bytes = 0;
  for (const std::string& t : st.names()) file_bytes += static_cast<int64_t>(st.get(t).nbytes());
  const int64_t before = memory_stats(Device::cpu()).active_bytes;
  std::unique_ptr<Model> model = load_model(dir, Device::cpu(), DType::f32);
  const int64_t held = memory_stats(Device::cpu()).active_bytes - before;
  std::cout << name << ": " << held << " bytes held, file tensors " << file_bytes << "\n";
  EXPECT_GE(held, file_bytes);
  EXPECT_LE(static_cast<double>(held), 1.05 * static_cast<double>(file_bytes));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MlxModelMemory,
                         ::testing::Values("llama3_q4_g64", "llama3_q8_g64"),
                         [](const auto& p) { return std::string(p.param); });

TEST(MlxModelErrors, UnsupportedBitsFailTheLoadNamingTheTensor) {
  const std::filesystem::path dir =
      edited_q4("bits7", [](nlohmann::json& c) { c["quantization"]["bits"] = 7; });
  std::string msg;
  try {
    load_model(dir, Device::cpu(), DType::f32);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    msg = e.what();
  }
  std::filesystem::remove_all(dir);
  for (const char* part :
       {"'model.embed_tokens.weight'", "bits 7 and group_size 32", "bits 2, 3, 4, 5, 6 or 8"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MlxModel,
                         ::testing::Values(Fixture{"llama3_q4_g32", QuantType::q4_1, 3e-2},
                                           Fixture{"llama3_q4_g64", QuantType::q4_a64, 3e-2},
                                           Fixture{"llama3_q8_g64", QuantType::q8_a64, 3e-2},
                                           Fixture{"llama3_q3_g64", QuantType::q4_a64, 3e-2}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace dspark
