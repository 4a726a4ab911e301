// Models whose GGUF weights stay block-quantized in memory (model/layers.h QuantizedWeight):
//   tests/data/gguf/tiny_llama_quant.gguf: the tiny golden Llama 3, every matrix in a block-32
//   type (Q8_0, Q4_0, Q5_0, Q5_1, Q4_1; v_proj in another type than q/k: a fused projection of
//   two parts); tiny_llama_k.gguf: one layer 256 wide in a Q4_K_M-like mix of Q4_K, Q5_K, Q6_K
//   (tools/gguf/make_fixtures.py).
// Each decodes the same greedy tokens as its twin loaded with the same weights dequantized to f32
// (logits within the quantized product's tolerance, ops/matmul.h), and greedy speculative decoding
// of it equals its plain greedy decoding.
#include <gtest/gtest.h>

#include <memory>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/gguf.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"
#include "dspark/spec/draft_model_source.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

std::filesystem::path fixture(const char* name) {
  return test::data_dir() / "gguf" / name;
}

struct Twins {
  std::unique_ptr<Model> quantized, dequantized;
};

Twins load_twins(const char* name) {
  const GgufFile file = GgufFile::open(fixture(name));
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  Twins t;
  t.quantized = create_model(config, weights, Device::cpu(), DType::f32);
  t.dequantized = create_model(config, test::DequantizedView(weights), Device::cpu(), DType::f32);
  return t;
}

class QuantModel : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantModel, KeepsBlocksAndMatchesItsDequantizedTwin) {
  Twins t = load_twins(GetParam());
  ASSERT_TRUE(t.quantized->lm_head().quantized());
  ASSERT_TRUE(t.quantized->embedding_table().quantized());
  EXPECT_FALSE(t.dequantized->lm_head().quantized());
  Context ctx(Device::cpu());
  const int vocab = t.quantized->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const std::vector<float> q = test::last_position_logits(*t.quantized, ctx, prompt);
    const std::vector<float> d = test::last_position_logits(*t.dequantized, ctx, prompt);
    // The 8-bit rounding of x in every product (ops/matmul.h) compounds over the layers.
    EXPECT_LE(test::relative_rms_error(q, d), 3e-2) << GetParam() << " prompt " << salt;
    EXPECT_EQ(generate(*t.quantized, ctx, prompt, test::greedy_tokens(24)).tokens,
              generate(*t.dequantized, ctx, prompt, test::greedy_tokens(24)).tokens)
        << GetParam() << " prompt " << salt;
  }
}

TEST_P(QuantModel, GreedySpeculativeEqualsPlainGreedy) {
  Twins t = load_twins(GetParam());
  Model& target = *t.quantized;
  Context ctx(Device::cpu());
  const int vocab = target.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts, plain;
  for (int salt = 0; salt < 4; ++salt) {
    prompts.push_back(test::fixed_prompt(vocab, salt));
    plain.push_back(generate(target, ctx, prompts.back(), test::greedy_tokens(20)).tokens);
  }
  for (int gamma : {1, 4}) {
    for (bool self : {false, true}) {
      std::unique_ptr<DraftSource> source;
      if (self) {  // the quantized model drafting for itself: every draft must be accepted
        source = std::make_unique<DraftModelSource>(load_twins(GetParam()).quantized, 4096);
      } else {
        source = std::make_unique<NgramSource>(NgramConfig{1, 3});
      }
      std::vector<RequestInput> reqs;
      for (const auto& p : prompts)
        reqs.push_back(RequestInput{p, test::greedy_tokens(20), nullptr, {}});
      SpecConfig cfg;
      cfg.gamma = gamma;
      const auto out = generate_speculative(target, ctx, source.get(), std::move(reqs), cfg);
      SpecTelemetry total;
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(out[i].result.tokens, plain[i])
            << GetParam() << (self ? " self" : " ngram") << " gamma " << gamma << " prompt " << i;
        total.merge(out[i].spec);
      }
      if (self) {
        EXPECT_GT(total.acceptance(), 0.9) << GetParam() << " gamma " << gamma;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantModel,
                         ::testing::Values("tiny_llama_quant.gguf", "tiny_llama_k.gguf"),
                         [](const auto& p) {
                           return std::string(p.param).find("_k") != std::string::npos
                                      ? std::string("KQuants")
                                      : std::string("Block32");
                         });

}  // namespace
}  // namespace dspark
